// FactLoom admin: interactive graphs (Cytoscape.js, served from node_modules by the app).
// A container names its elements (a JSON script block) and, optionally, the URL that expands a node.
(function () {
  "use strict";
  if (typeof cytoscape === "undefined") {
    document.querySelectorAll(".graph").forEach(function (el) {
      el.innerHTML = '<p class="empty">The graph library is missing: run scripts/setup.sh (npm ci).</p>';
    });
    return;
  }

  var STYLE = [
    { selector: "node", style: {
      "background-color": "#94a3b8", "label": "data(label)", "font-size": 11, "color": "#1f2433",
      "text-valign": "bottom", "text-margin-y": 4, "width": 18, "height": 18, "text-wrap": "ellipsis",
      "text-max-width": 140, "border-width": 2, "border-color": "#fff", "text-background-color": "#fff",
      "text-background-opacity": 0.75, "text-background-padding": 1 } },
    { selector: "node.expanded", style: { "background-color": "#64748b" } },
    { selector: "node.focus, node.seed", style: { "background-color": "#4f46e5", "width": 28, "height": 28,
      "font-weight": "bold", "font-size": 12 } },
    { selector: "node.new", style: { "background-color": "#fff", "border-color": "#f59e0b", "border-style": "dashed",
      "border-width": 3 } },
    { selector: "node.answer", style: { "background-color": "#10b981", "width": 26, "height": 26, "font-weight": "bold" } },
    { selector: "node:selected", style: { "border-color": "#f59e0b", "border-width": 3 } },
    { selector: "edge", style: {
      "width": 1.5, "line-color": "#c3c8d8", "target-arrow-color": "#c3c8d8", "target-arrow-shape": "triangle",
      "curve-style": "bezier", "arrow-scale": 0.8, "label": "data(label)", "font-size": 9, "color": "#6b7285",
      "text-rotation": "autorotate", "text-background-color": "#fcfcfe", "text-background-opacity": 0.9 } },
    { selector: "edge.claim", style: { "line-color": "#f59e0b", "target-arrow-color": "#f59e0b",
      "line-style": "dashed", "width": 3, "color": "#b45309", "font-weight": "bold", "font-size": 11 } },
    { selector: "edge.hl", style: { "line-color": "#4f46e5", "target-arrow-color": "#4f46e5", "width": 3.5,
      "color": "#3730a3", "font-weight": "bold", "z-index": 10 } },
    { selector: ".faded", style: { "opacity": 0.25 } },
  ];

  function layout(cy) {
    // rings: the focus (claim ends, the entity, seeds) in the middle, what they touch around them
    var rank = function (n) {
      return n.hasClass("focus") || n.hasClass("seed") ? 3 : n.hasClass("answer") ? 1 : 2;
    };
    cy.layout({ name: "concentric", concentric: rank, levelWidth: function () { return 1; },
                minNodeSpacing: 64, padding: 40, animate: false, fit: true, avoidOverlap: true }).run();
    // a handful of nodes would otherwise be blown up to fill the canvas
    if (cy.zoom() > 1.2) { cy.zoom(1.2); cy.center(); }
  }

  function setup(container) {
    var data = JSON.parse(document.getElementById(container.dataset.graph).textContent || "[]");
    var cy = cytoscape({ container: container, elements: data, style: STYLE, wheelSensitivity: 0.3,
                         minZoom: 0.1, maxZoom: 4 });
    container._cy = cy;
    layout(cy);
    var wrap = container.parentNode;
    var tip = wrap.querySelector(".graph-tip");
    wrap.querySelectorAll("[data-zoom]").forEach(function (b) {
      b.addEventListener("click", function () {
        var how = b.dataset.zoom;
        if (how === "fit") { cy.fit(undefined, 30); return; }
        var z = cy.zoom() * (how === "in" ? 1.3 : 1 / 1.3);
        cy.zoom({ level: z, renderedPosition: { x: container.clientWidth / 2, y: container.clientHeight / 2 } });
      });
    });
    cy.on("mouseover", "node, edge", function (e) {
      var d = e.target.data();
      tip.textContent = e.target.isNode() ? d.label : d.label + (d.sources && d.sources.length ? " · " + d.sources.join(", ") : "");
      tip.style.display = "block";
    });
    cy.on("mouseout", "node, edge", function () { tip.style.display = "none"; });

    var expandUrl = container.dataset.expand;
    var entity = function (id) { return /^[0-9a-f]{16,64}$/.test(id); };
    if (expandUrl) {
      cy.on("tap", "node", function (e) {
        var node = e.target;
        if (node.hasClass("expanded") || !entity(node.id())) return;
        node.addClass("expanded");
        var q = new URLSearchParams({ kb: container.dataset.kb, id: node.id() });
        if (container.dataset.asOf) q.set("as_of", container.dataset.asOf);
        fetch(expandUrl + "?" + q.toString(), { credentials: "same-origin", headers: { Accept: "application/json" } })
          .then(function (r) { if (!r.ok) throw new Error(r.status); return r.json(); })
          .then(function (body) {
            var fresh = body.elements.filter(function (el) { return cy.getElementById(el.data.id).empty(); });
            var nodes = fresh.filter(function (el) { return !el.data.source; });
            // new neighbours go on an arc around the clicked node, facing away from the rest of the graph
            var others = cy.nodes().not(node);
            var box = others.length ? others.boundingBox() : { x1: 0, x2: 0, y1: 0, y2: 0 };
            var p = node.position();
            var dx = p.x - (box.x1 + box.x2) / 2, dy = p.y - (box.y1 + box.y2) / 2;
            var facing = dx === 0 && dy === 0 ? 0 : Math.atan2(dy, dx);
            var spread = Math.min(2 * Math.PI, Math.max(Math.PI / 2, nodes.length * 0.45));
            var radius = 110 + 6 * nodes.length;
            nodes.forEach(function (el, i) {
              var a = facing - spread / 2 + spread * (i + 0.5) / nodes.length;
              el.position = { x: p.x + radius * Math.cos(a), y: p.y + radius * Math.sin(a) };
              el.classes = (el.classes || "").replace("expanded", "");
            });
            var added = cy.add(fresh);
            node.addClass("expanded");
            if (added.length) cy.animate({ fit: { eles: cy.elements(), padding: 30 }, duration: 250 });
          })
          .catch(function () { node.removeClass("expanded"); });
      });
      cy.on("dbltap", "node", function (e) {
        if (!entity(e.target.id())) return;
        window.location.href = "/admin/graph/entity/" + e.target.id() + "?kb=" + encodeURIComponent(container.dataset.kb);
      });
    }
    return cy;
  }

  document.querySelectorAll("[data-graph]").forEach(setup);

  // Ask: a click on an answer highlights its paths
  var answers = document.getElementById("answers");
  var canvas = document.getElementById("ask-graph");
  if (answers && canvas && canvas._cy) {
    var cy = canvas._cy;
    var pick = function (rank) {
      answers.querySelectorAll("li").forEach(function (li) { li.classList.toggle("on", li.dataset.rank === String(rank)); });
      cy.elements().removeClass("hl faded");
      var path = cy.edges().filter(function (e) { return (e.data("answers") || []).indexOf(rank) >= 0; });
      var keep = path.union(path.connectedNodes());
      cy.elements().difference(keep).addClass("faded");
      path.addClass("hl");
    };
    answers.querySelectorAll("li").forEach(function (li) {
      li.addEventListener("click", function () { pick(Number(li.dataset.rank)); });
    });
    if (answers.querySelector("li")) pick(0);
  }
})();
