// FactLoom admin: interactive graphs (Cytoscape.js, served from node_modules by the app).
// A container names its elements (a JSON script block) and, optionally, the URL that expands a node.
//
// Layouts are our own, so that labels stay legible at the first zoom and no edge runs through a node:
// - a neighbourhood (the entity page): its neighbours on a ring around the focus, grouped by relation,
//   labels pointing outward along the ring's radius (they never overlap, however many neighbours);
// - a claim (the review item page): subject on the left, object on the right, each with its own
//   neighbours on an outer half-ring, shared neighbours above and below the middle, so the claim's
//   dashed edge is a straight line with nothing on it;
// - answers (the Ask page): columns by hops from the linked entities, answers last.
(function () {
  "use strict";
  if (typeof cytoscape === "undefined") {
    document.querySelectorAll(".graph").forEach(function (el) {
      el.innerHTML = '<p class="empty">The graph library is missing: run scripts/setup.sh (npm ci).</p>';
    });
    return;
  }

  var FONT = 13;        // node labels, px at zoom 1; layouts aim at zoom 1
  var LABEL_W = 120;    // a longer label ends in an ellipsis (the tooltip has it whole)
  var ROW = 22;         // room per neighbour along a ring: one line of label text
  var NODE = 18;

  var STYLE = [
    { selector: "node", style: {
      "background-color": "#94a3b8", "label": "data(label)", "font-size": FONT, "color": "#1f2433",
      "text-valign": "bottom", "text-margin-y": 4, "width": NODE, "height": NODE, "text-wrap": "ellipsis",
      "text-max-width": LABEL_W, "border-width": 2, "border-color": "#fff", "text-background-color": "#fff",
      "text-background-opacity": 0.85, "text-background-padding": 2, "text-background-shape": "roundrectangle",
      "min-zoomed-font-size": 7 } },
    { selector: "node.expanded", style: { "background-color": "#64748b" } },
    { selector: "node.focus, node.seed", style: { "background-color": "#4f46e5", "width": 28, "height": 28,
      "font-weight": "bold", "font-size": FONT + 1 } },
    { selector: "node.new", style: { "background-color": "#fff", "border-color": "#f59e0b", "border-style": "dashed",
      "border-width": 3 } },
    { selector: "node.answer", style: { "background-color": "#10b981", "width": 26, "height": 26, "font-weight": "bold" } },
    { selector: "node.more", style: { "background-color": "#fff", "border-color": "#4f46e5", "border-style": "dashed",
      "border-width": 2, "shape": "round-rectangle", "color": "#3730a3", "font-style": "italic", "text-max-width": 2 * LABEL_W } },
    { selector: "node:selected", style: { "border-color": "#f59e0b", "border-width": 3 } },
    { selector: "edge", style: {
      "width": 1.5, "line-color": "#c3c8d8", "target-arrow-color": "#c3c8d8", "target-arrow-shape": "triangle",
      "curve-style": "bezier", "arrow-scale": 0.8, "label": "data(label)", "font-size": 10, "color": "#6b7285",
      "text-rotation": "autorotate", "text-background-color": "#fcfcfe", "text-background-opacity": 0.9,
      "min-zoomed-font-size": 7 } },
    { selector: "edge.quiet", style: { "label": "" } },
    // around a ring, a relation's name sits near the neighbour, clear of the hub's own label
    { selector: "edge.at-target", style: { "label": "", "target-label": "data(label)", "target-text-offset": 40,
      "target-text-rotation": "autorotate" } },
    { selector: "edge.at-source", style: { "label": "", "source-label": "data(label)", "source-text-offset": 40,
      "source-text-rotation": "autorotate" } },
    { selector: "edge.more", style: { "line-style": "dashed", "line-color": "#a5b4fc", "target-arrow-color": "#a5b4fc" } },
    { selector: "edge.claim", style: { "line-color": "#f59e0b", "target-arrow-color": "#f59e0b",
      "line-style": "dashed", "width": 3, "color": "#b45309", "font-weight": "bold", "font-size": 12 } },
    { selector: "edge.hl", style: { "line-color": "#4f46e5", "target-arrow-color": "#4f46e5", "width": 3.5,
      "color": "#3730a3", "font-weight": "bold", "z-index": 10 } },
    { selector: ".faded", style: { "opacity": 0.25 } },
  ];

  // --- placing nodes

  // a label pointing away from `angle`'s centre, along the radius, starting just off the node
  function radial(node, angle) {
    var right = Math.cos(angle) >= -1e-9, gap = node.width() / 2 + 5;
    node.style({
      "text-valign": "center", "text-halign": right ? "right" : "left",
      "text-rotation": (right ? angle : angle - Math.PI) + "rad",
      // the label is anchored beside the node, then turned about that anchor: move the anchor onto the radius
      "text-margin-x": gap * Math.cos(angle) + (right ? -1 : 1) * node.width() / 2,
      "text-margin-y": gap * Math.sin(angle),
    });
  }

  // `nodes` on an arc of `spread` radians around `centre`, centred on the direction `facing`
  function arc(nodes, centre, facing, spread, minRadius) {
    var n = nodes.length;
    if (!n) return;
    var full = spread >= 2 * Math.PI - 1e-9;
    var radius = Math.max(minRadius, ROW * n / spread);
    nodes.forEach(function (node, i) {
      var a = full ? facing + 2 * Math.PI * i / n : facing - spread / 2 + spread * (i + 0.5) / n;
      node.position({ x: centre.x + radius * Math.cos(a), y: centre.y + radius * Math.sin(a) });
      radial(node, a);
    });
  }

  // the relation that ties a neighbour to `hub` ("in:directed_by"), so a ring reads relation by relation
  function relationTo(node, hub) {
    var e = node.edgesWith(hub)[0];
    if (!e) return "~";
    return (e.source().same(hub) ? "out:" : "in:") + (e.data("label") || e.data("predicate") || "");
  }

  function ringOrder(nodes, hub) {
    return nodes.sort(function (a, b) {
      var ra = relationTo(a, hub), rb = relationTo(b, hub);
      if (ra !== rb) return ra < rb ? -1 : 1;
      var ma = a.hasClass("more") ? 1 : 0, mb = b.hasClass("more") ? 1 : 0;  // the summary ends its relation
      if (ma !== mb) return ma - mb;
      return String(a.data("label")).localeCompare(String(b.data("label")));
    });
  }

  // a relation's name once, on the middle edge of its neighbours, rather than on each of 25 edges
  function labelOnce(ordered, hub) {
    var groups = {};
    ordered.forEach(function (n) { (groups[relationTo(n, hub)] = groups[relationTo(n, hub)] || []).push(n); });
    Object.keys(groups).forEach(function (key) {
      var group = groups[key], keep = group[Math.floor((group.length - 1) / 2)];
      group.forEach(function (n) {
        n.edgesWith(hub).forEach(function (e) {
          e.toggleClass("quiet", !n.same(keep));
          e.toggleClass("at-target", n.same(keep) && e.target().same(n));
          e.toggleClass("at-source", n.same(keep) && e.source().same(n));
        });
      });
    });
  }

  function ring(nodes, hub, facing, spread, minRadius) {
    var ordered = ringOrder(nodes, hub);
    arc(ordered, hub.position(), facing, spread, minRadius);
    labelOnce(ordered, hub);
  }

  function aroundOne(cy, hub) {
    hub.position({ x: 0, y: 0 });
    ring(cy.nodes().not(hub), hub, -Math.PI / 2, 2 * Math.PI, 150);
  }

  function aroundTwo(cy, left, right) {
    var mine = function (hub, other) {
      return cy.nodes().filter(function (n) {
        return !n.same(left) && !n.same(right) && n.edgesWith(hub).nonempty() && n.edgesWith(other).empty();
      });
    };
    var ours = mine(left, right), theirs = mine(right, left);
    var shared = cy.nodes().not(left).not(right).not(ours).not(theirs);
    var apart = 120, spread = Math.PI * 7 / 9;
    left.position({ x: -apart, y: 0 });
    right.position({ x: apart, y: 0 });
    // their names above the claim, facing each other: the only place no edge passes
    [[left, "right", -1], [right, "left", 1]].forEach(function (end) {
      end[0].style({ "text-valign": "top", "text-halign": end[1], "text-max-width": apart - 20,
                     "text-margin-x": end[2] * 8, "text-margin-y": -2 });
    });
    ring(ours, left, Math.PI, spread, 120);
    ring(theirs, right, 0, spread, 120);
    // shared neighbours on the vertical between the two, below the claim (never on it)
    shared.forEach(function (node, i) { node.position({ x: 0, y: 48 * (i + 1) }); });
  }

  // columns by hops from the linked entities; in a column, near the middle of what they hang from
  function columns(cy) {
    var depth = {}, order = [], frontier = cy.nodes(".seed");
    if (frontier.empty()) frontier = cy.nodes().slice(0, 1);
    frontier.forEach(function (n) { depth[n.id()] = 0; order.push(n); });
    for (var i = 0; i < order.length; i++) {
      order[i].neighborhood("node").forEach(function (m) {
        if (!(m.id() in depth)) { depth[m.id()] = depth[order[i].id()] + 1; order.push(m); }
      });
    }
    cy.nodes().forEach(function (n) { if (!(n.id() in depth)) { depth[n.id()] = 0; order.push(n); } });
    var cols = [];
    order.forEach(function (n) { (cols[depth[n.id()]] = cols[depth[n.id()]] || []).push(n); });
    var width = LABEL_W + 60, height = cy.container().clientHeight - 60;
    var y = {};
    cols.forEach(function (col, c) {
      if (c > 0) {
        var mean = function (n) {
          var ys = n.neighborhood("node").filter(function (m) { return depth[m.id()] === c - 1; })
            .map(function (m) { return y[m.id()]; });
          return ys.length ? ys.reduce(function (s, v) { return s + v; }, 0) / ys.length : 0;
        };
        col.sort(function (a, b) { return mean(a) - mean(b); });
      }
      // a label under each node while the column fits the canvas, beside it (rows of one line) after
      var gap = Math.max(ROW + 6, Math.min(56, height / col.length)), beside = gap < 50;
      col.forEach(function (n, i) {
        y[n.id()] = (i - (col.length - 1) / 2) * gap;
        n.position({ x: c * width, y: y[n.id()] });
        if (beside) n.style({ "text-valign": "center", "text-halign": "right", "text-margin-x": 4, "text-margin-y": 0 });
      });
    });
    // between two columns, each relation named once, on its middle edge
    var groups = {};
    cy.edges().forEach(function (e) {
      var key = Math.min(depth[e.source().id()], depth[e.target().id()]) + ":" + e.data("label");
      (groups[key] = groups[key] || []).push(e);
    });
    Object.keys(groups).forEach(function (key) {
      var group = groups[key].sort(function (a, b) { return a.midpoint().y - b.midpoint().y; });
      var keep = group[Math.floor((group.length - 1) / 2)];
      group.forEach(function (e) { e.toggleClass("quiet", !e.same(keep)); });
    });
  }

  function layout(cy) {
    var foci = cy.nodes(".focus"), claim = cy.edges(".claim")[0];
    if (cy.nodes(".seed, .answer").nonempty()) columns(cy);
    else if (claim && !claim.source().same(claim.target())) aroundTwo(cy, claim.source(), claim.target());
    else if (foci.length === 1) aroundOne(cy, foci[0]);
    else cy.layout({ name: "concentric", minNodeSpacing: 64, padding: 40, animate: false }).run();
    // the layouts are drawn for zoom 1: a bigger picture is fitted, a small one not blown up
    cy.fit(undefined, 24);
    if (cy.zoom() > 1) { cy.zoom(1); cy.center(); }
  }

  // --- one canvas

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
      tip.textContent = e.target.hasClass("more") ? (d.label || "") + " · click to draw more"
        : e.target.isNode() ? d.label
        : (d.label || "") + (d.sources && d.sources.length ? " · " + d.sources.join(", ") : "");
      tip.style.display = "block";
    });
    cy.on("mouseout", "node, edge", function () { tip.style.display = "none"; });

    var expandUrl = container.dataset.expand;
    var entity = function (id) { return /^[0-9a-f]{16,64}$/.test(id); };
    if (!expandUrl) return cy;

    var fetchElements = function (params) {
      var q = new URLSearchParams(Object.assign({ kb: container.dataset.kb }, params));
      if (container.dataset.asOf) q.set("as_of", container.dataset.asOf);
      return fetch(expandUrl + "?" + q.toString(), { credentials: "same-origin", headers: { Accept: "application/json" } })
        .then(function (r) { if (!r.ok) throw new Error(r.status); return r.json(); });
    };
    // add what came back that is not drawn yet; a summary that came back again takes its new count.
    // While the page's own layout stands (no node expanded yet), it is laid out again, its ring the
    // wider; after that, new nodes go on an arc around `centre`, facing away from `from` (the rest of
    // the graph, or the hub a summary hangs from)
    var pristine = true;
    var grow = function (elements, centre, from, hub, summary) {
      var fresh = elements.filter(function (el) { return cy.getElementById(el.data.id).empty(); });
      var p = centre.position();
      var dx = p.x - from.x, dy = p.y - from.y;
      var facing = dx === 0 && dy === 0 ? 0 : Math.atan2(dy, dx);
      var added = cy.add(fresh);
      var placed = added.nodes();
      if (summary) {
        var again = elements.filter(function (el) { return el.data.id === summary.id(); })[0];
        if (again) {
          summary.data({ label: again.data.label, shown: again.data.shown, total: again.data.total });
          placed = placed.union(summary);
        } else summary.remove();
        if (pristine) { layout(cy); return; }
      }
      var ordered = ringOrder(placed, hub);
      arc(ordered, p, facing, Math.min(Math.PI, Math.max(Math.PI / 2, placed.length * 0.3)), 110);
      if (hub.nonempty()) labelOnce(ordered.filter(function (n) { return !n.same(hub); }), hub);
      if (added.length) cy.animate({ fit: { eles: cy.elements(), padding: 30 }, duration: 250 });
    };
    var middle = function (node) {
      var others = cy.nodes().not(node);
      if (others.empty()) return node.position();
      var box = others.boundingBox({ includeLabels: false });
      return { x: (box.x1 + box.x2) / 2, y: (box.y1 + box.y2) / 2 };
    };

    cy.on("tap", "node", function (e) {
      var node = e.target;
      if (node.hasClass("more")) {
        if (node.scratch("_loading")) return;
        node.scratch("_loading", true);
        var d = node.data();
        var hub = cy.getElementById(d.entity);
        fetchElements({ id: d.entity, predicate: d.predicate, outgoing: d.outgoing ? "true" : "false", skip: d.shown })
          .then(function (body) { grow(body.elements, node, hub.nonempty() ? hub.position() : middle(node), hub, node); })
          .catch(function () {})
          .then(function () { node.scratch("_loading", false); });
        return;
      }
      if (node.hasClass("expanded") || !entity(node.id())) return;
      node.addClass("expanded");
      fetchElements({ id: node.id() })
        .then(function (body) {
          body.elements.forEach(function (el) { el.classes = (el.classes || "").replace("expanded", ""); });
          grow(body.elements, node, middle(node), node, null);
          node.addClass("expanded");
          // its label pointed outward, where its neighbours now are: back under the node
          node.removeStyle("text-valign text-halign text-rotation text-margin-x text-margin-y");
          pristine = false;
        })
        .catch(function () { node.removeClass("expanded"); });
    });
    cy.on("dbltap", "node", function (e) {
      if (!entity(e.target.id())) return;
      window.location.href = "/admin/graph/entity/" + e.target.id() + "?kb=" + encodeURIComponent(container.dataset.kb);
    });
    return cy;
  }

  document.querySelectorAll("[data-graph]").forEach(setup);

  // Ask: a click on an answer highlights its paths, a click on one of its paths that path alone
  var answers = document.getElementById("answers");
  var canvas = document.getElementById("ask-graph");
  if (answers && canvas && canvas._cy) {
    var cy = canvas._cy;
    var show = function (rank, keep) {
      answers.querySelectorAll("li").forEach(function (li) { li.classList.toggle("on", li.dataset.rank === String(rank)); });
      answers.querySelectorAll(".path").forEach(function (p) { p.classList.toggle("on", !!keep && p.dataset.path === keep); });
      cy.elements().removeClass("hl faded");
      var path = cy.edges().filter(function (e) {
        return keep ? (e.data("paths") || []).indexOf(keep) >= 0 : (e.data("answers") || []).indexOf(rank) >= 0;
      });
      cy.elements().difference(path.union(path.connectedNodes())).addClass("faded");
      path.addClass("hl");
    };
    answers.querySelectorAll("li").forEach(function (li) {
      li.addEventListener("click", function (e) {
        var line = e.target.closest ? e.target.closest(".path") : null;
        show(Number(li.dataset.rank), line ? line.dataset.path : null);
      });
    });
    if (answers.querySelector("li")) show(0, null);
  }
})();
