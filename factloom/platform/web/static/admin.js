// FactLoom admin: keyboard shortcuts on a review item, row selection in the queue. No dependencies.
(function () {
  "use strict";

  function typing(event) {
    var t = event.target;
    return t && (t.isContentEditable || /^(INPUT|TEXTAREA|SELECT)$/.test(t.tagName));
  }

  // the undo notice after a decision: a countdown, then it goes; u undoes while it shows
  var undo = document.querySelector("form.undo[data-seconds]");
  if (undo) {
    var left = parseInt(undo.dataset.seconds, 10) || 0;
    var shown = undo.querySelector(".countdown");
    var tick = window.setInterval(function () {
      left -= 1;
      if (left <= 0) { window.clearInterval(tick); undo.remove(); return; }
      shown.textContent = left + " s";
    }, 1000);
    document.addEventListener("keydown", function (event) {
      if (event.ctrlKey || event.metaKey || event.altKey || typing(event) || !undo.isConnected) return;
      if (event.key.toLowerCase() === "u") { event.preventDefault(); undo.querySelector("button").click(); }
    });
  }

  // review item: a accept, r reject, b both hold (a conflict), e correct, j/k next/previous, / focus the reason
  var item = document.querySelector("[data-shortcuts]");
  if (item) {
    document.addEventListener("keydown", function (event) {
      if (event.ctrlKey || event.metaKey || event.altKey || event.repeat) return;
      if (event.key === "Escape" && typing(event)) { event.target.blur(); return; }
      if (typing(event)) return;
      var key = event.key.toLowerCase();
      if (key === "/") {
        var reason = document.getElementById("reason");
        if (reason) { event.preventDefault(); reason.focus(); }
        return;
      }
      if (key === "e") {
        var correct = document.getElementById("correct");
        if (correct) { event.preventDefault(); correct.open = true; document.getElementById("c-object").focus(); }
        return;
      }
      var target = document.querySelector('[data-key="' + key + '"]');
      if (!target) return;
      event.preventDefault();
      if (target.tagName === "BUTTON") {
        if (target.form && target.form.dataset.sent) return;  // one decision per page
        if (target.form) target.form.dataset.sent = "1";
        target.click();
      } else {
        window.location.href = target.href;
      }
    });
  }

  // queue: select rows, select all, enable the bulk buttons
  var bulk = document.getElementById("bulk");
  if (bulk) {
    var boxes = Array.prototype.slice.call(bulk.querySelectorAll('input[name="ids"]'));
    var all = document.getElementById("select-all");
    var count = document.getElementById("sel-count");
    var buttons = bulk.querySelectorAll("[data-needs-selection]");
    var refresh = function () {
      var n = boxes.filter(function (b) { return b.checked; }).length;
      count.textContent = n + " selected";
      buttons.forEach(function (b) { b.disabled = n === 0; });
      boxes.forEach(function (b) { b.closest("tr").classList.toggle("selected", b.checked); });
      if (all) { all.checked = n > 0 && n === boxes.length; all.indeterminate = n > 0 && n < boxes.length; }
    };
    boxes.forEach(function (b) { b.addEventListener("change", refresh); });
    if (all) all.addEventListener("change", function () {
      boxes.forEach(function (b) { b.checked = all.checked; });
      refresh();
    });
    refresh();

    // j/k move through the rows, x selects one, o (or Enter) opens it
    var rows = Array.prototype.slice.call(bulk.querySelectorAll("tbody tr[data-id]"));
    var at = -1;
    var move = function (to) {
      if (!rows.length) return;
      if (at >= 0) rows[at].classList.remove("cursor");
      at = Math.max(0, Math.min(rows.length - 1, to));
      rows[at].classList.add("cursor");
      rows[at].scrollIntoView({ block: "nearest" });
    };
    document.addEventListener("keydown", function (event) {
      if (event.ctrlKey || event.metaKey || event.altKey || typing(event)) return;
      var key = event.key.toLowerCase();
      if (key === "j") { event.preventDefault(); move(at + 1); }
      else if (key === "k") { event.preventDefault(); move(at - 1); }
      else if (key === "x" && at >= 0) {
        event.preventDefault();
        var box = rows[at].querySelector('input[name="ids"]');
        box.checked = !box.checked;
        refresh();
      } else if ((key === "o" || key === "enter") && at >= 0) {
        event.preventDefault();
        window.location.href = rows[at].querySelector("a.item-link").href;
      }
    });
  }

  // ask: ✓ / ✗ beside an answer records feedback in place (without scripts the form posts and the
  // page comes back with the same question)
  document.querySelectorAll("form.feedback[data-api]").forEach(function (form) {
    form.addEventListener("submit", function (event) {
      var button = event.submitter;
      if (!button || !window.fetch) return;
      event.preventDefault();
      if (form.dataset.sent) return;
      form.dataset.sent = "1";
      var status = form.querySelector(".fb-status");
      var csrf = document.querySelector('meta[name="csrf-token"]');
      var body = new URLSearchParams(new FormData(form));
      body.set("verdict", button.value);
      fetch(form.dataset.api, {
        method: "POST", credentials: "same-origin", body: body,
        headers: { Accept: "application/json", "X-CSRF-Token": csrf ? csrf.content : "" }
      }).then(function (response) {
        return response.json().catch(function () { return {}; }).then(function (data) {
          if (!response.ok) throw new Error(data.detail || ("HTTP " + response.status));
          return data;
        });
      }).then(function (data) {
        form.querySelectorAll("button, details").forEach(function (el) { el.hidden = true; });
        status.classList.remove("error");
        status.textContent = data.message || "thanks";
        status.focus();
      }, function (error) {
        delete form.dataset.sent;
        status.classList.add("error");
        status.textContent = "not recorded: " + error.message;
      });
    });
  });
})();
