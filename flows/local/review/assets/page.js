// A local run's page, and the run list of `flows/cifar.py ui`: drawn from the JSON in
// #run-data, no framework, nothing fetched but the page's own address (to follow a run).
// The graph's nodes and places come from graph.js (the Argo UI's prepareGraph and fast
// layout); drawn here as graph-panel.tsx draws them: a circle coloured by phase
// (graph-panel.scss), the phase's icon (icons.ts: Font Awesome glyphs, drawn here as
// paths: no font), the label under it (label.tsx); StepGroup and TaskGroup nodes not
// drawn (genres.ts), edges meeting at their place. A click shows the node's panel, as
// the Argo UI's node info: its template, phase, times, inputs, outputs, retries, the end
// of its log. A running run is followed: the page asks for itself every 2 s.
(function () {
  "use strict";
  var SVG = "http://www.w3.org/2000/svg";
  var G = window.ArgoGraph, NODE = G.NODE, MIN = G.MIN;
  var HIDDEN_GENRES = {StepGroup: true, TaskGroup: true};
  var DATA = JSON.parse(document.getElementById("run-data").textContent);
  var view = {selected: null, expanded: {}};

  // --- small helpers ---------------------------------------------------------------
  function el(tag, attrs, children) {
    var node = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (k) { node.setAttribute(k, attrs[k]); });
    (children || []).forEach(function (c) {
      node.appendChild(typeof c === "string" ? document.createTextNode(c) : c);
    });
    return node;
  }
  function svg(tag, attrs, children) {
    var node = document.createElementNS(SVG, tag);
    Object.keys(attrs || {}).forEach(function (k) { node.setAttribute(k, attrs[k]); });
    (children || []).forEach(function (c) { node.appendChild(c); });
    return node;
  }
  function seconds(text) { return text ? Date.parse(text) / 1000 : null; }
  // util/humanize RelativeDurationShort: 0s, 42s, 3m, 1h, 2d
  function short(started, finished) {
    if (started === null) return "0s";
    var d = (finished === null ? Date.now() / 1000 : finished) - started;
    if (d < 1) return "0s";
    if (d < 60) return Math.floor(d) + "s";
    if (d < 3600) return Math.floor(d / 60) + "m";
    if (d < 86400) return Math.floor(d / 3600) + "h";
    return Math.floor(d / 86400) + "d";
  }
  function when(text) { return text ? new Date(text).toLocaleString() : ""; }

  // --- drawing -----------------------------------------------------------------------
  function icon(name) {  // icons.ts's Font Awesome glyphs, drawn as paths (no font)
    switch (name) {
      case "Succeeded": return svg("path", {"class": "icon", d: "M-6 0 L-2 4.5 L6.5 -5"});
      case "Failed": case "Error":
        return svg("path", {"class": "icon", d: "M-5 -5 L5 5 M5 -5 L-5 5"});
      case "Skipped": case "Omitted":
        return svg("path", {"class": "icon solid", d: "M-7 -5 L0 0 L-7 5 Z M0 -5 L7 0 L0 5 Z"});
      case "Running":
        return svg("path", {"class": "icon spin", d: "M0 -6 A6 6 0 1 1 -6 0"});
      case "Suspended":
        return svg("path", {"class": "icon solid", d: "M-5 -6 h3.5 v12 h-3.5 Z M1.5 -6 h3.5 v12 h-3.5 Z"});
      case "Collapsed":
        return svg("path", {"class": "icon solid",
          d: "M-8 0 a2 2 0 1 0 4 0 a2 2 0 1 0 -4 0 M-2 0 a2 2 0 1 0 4 0 a2 2 0 1 0 -4 0" +
             " M4 0 a2 2 0 1 0 4 0 a2 2 0 1 0 -4 0"});
      case "Memoized":  // icon.tsx: the check, and a small database badge
        return svg("g", {}, [icon("Succeeded"), svg("circle", {"class": "memo", cx: NODE / 3,
          cy: NODE / 3, r: NODE / 4}), svg("path", {"class": "icon", "stroke-width": 1.2,
          d: "M" + (NODE / 3 - 3) + " " + (NODE / 3 - 2) + " h6 M" + (NODE / 3 - 3) + " " +
             (NODE / 3) + " h6 M" + (NODE / 3 - 3) + " " + (NODE / 3 + 2) + " h6"})]);
      default:  // Pending: a clock
        return svg("path", {"class": "icon", d: "M0 -6.5 A6.5 6.5 0 1 1 -0.01 -6.5 M0 -3.5 V0 L3 2"});
    }
  }
  function labelText(label) {  // label.tsx formatLabel: 14 a line, split at a dash
    var max = 14, text = svg("text", {"class": "node-label", "font-size": 10});
    function line(s, dy) {
      var t = svg("tspan", {x: 0, dy: dy}); t.textContent = s; text.appendChild(t);
    }
    if (label.length <= max) { line(label, "0"); return text; }
    if (label.length <= max * 2) {
      var split = label.split("-");
      if (split.length >= 2) {
        var best = -1, diff = Infinity;
        for (var i = 1; i <= split.length; i++) {
          var d = Math.abs(split.slice(0, i).join("-").length - split.slice(i).join("-").length);
          if (d < diff) { diff = d; best = i; }
        }
        line(split.slice(0, best).join("-") + "-", "-0.2em");
        line(split.slice(best).join("-"), "1.2em");
        return text;
      }
      line(label.substr(0, label.length / 2), "-0.2em");
      line(label.substr(label.length / 2), "1.2em");
      return text;
    }
    line(label.substr(0, max - 2) + "..", "-0.2em");
    line(label.substr(label.length + 1 - max), "1.2em");
    return text;
  }
  function drawGraph(container) {
    var workflow = DATA.workflow, all = workflow.status.nodes || {};
    var graph = G.prepare(all, workflow.metadata.name, view.expanded);
    G.layout(graph);
    var root = svg("svg", {"class": "graph", width: graph.width + NODE * 2,
                           height: graph.height + NODE * 2});
    root.appendChild(svg("defs", {}, [svg("marker", {id: "arrow", viewBox: "0 0 10 10",
      refX: 10, refY: 5, markerWidth: NODE / 8, markerHeight: NODE / 8,
      orient: "auto-start-reverse"}, [svg("path", {d: "M 0 0 L 10 5 L 0 10 z",
      "class": "arrow"})])]));
    var body = svg("g", {transform: "translate(" + NODE + "," + NODE + ")"});
    root.appendChild(body);
    function hidden(id) { return HIDDEN_GENRES[graph.nodes.get(id).genre]; }
    graph.edges.forEach(function (e) {
      if (!graph.nodes.has(e.v) || !graph.nodes.has(e.w)) return;
      var a = graph.nodes.get(e.v), b = graph.nodes.get(e.w);
      var d = "M " + a.x + " " + (a.y + (hidden(e.v) ? MIN : NODE / 2)) +
              " L " + b.x + " " + (b.y - (hidden(e.w) ? MIN : NODE / 2));
      body.appendChild(svg("g", {"class": "edge arrow", "data-from": e.v, "data-to": e.w},
        [svg("path", {"class": "line", d: d, "marker-end": "url(#arrow)"})]));
    });
    graph.nodes.forEach(function (label, id) {
      if (hidden(id)) return;
      var selected = view.selected === id ? " selected" : "";
      var g = svg("g", {"class": "node " + label.classNames + selected, "data-id": id,
                        "data-genre": label.genre, transform: "translate(" + label.x + "," +
                        label.y + ")", style: "stroke-width:" + NODE / 15});
      var title = svg("title"); title.textContent = label.label + " (" + label.classNames + ")";
      g.appendChild(title);
      g.appendChild(svg("circle", {r: NODE / 2, "class": "bg"}));
      g.appendChild(icon(label.icon));
      var text = labelText(label.label);
      g.appendChild(svg("g", {transform: "translate(0," + NODE * 3 / 4 + ")"}, [text]));
      if (label.hidden) g.setAttribute("data-hidden", label.hidden.join(" "));
      g.addEventListener("click", function () { choose(id); });
      body.appendChild(g);
    });
    container.appendChild(root);
  }
  function choose(id) {
    if (G.isCollapsed(id)) {  // expandNode: open the collapsed node's parent
      var parent = JSON.parse(id).parent;
      while (G.isCollapsed(parent)) parent = JSON.parse(parent).parent;
      view.expanded[parent] = true;
    } else {
      view.selected = view.selected === id ? null : id;
    }
    remember();
    draw();
  }

  // --- the node panel ------------------------------------------------------------------
  function rows(pairs) {
    return el("table", {}, pairs.filter(function (p) { return p[1] !== "" && p[1] !== null &&
      p[1] !== undefined; }).map(function (p) {
      return el("tr", {}, [el("td", {}, [p[0]]), el("td", {}, [String(p[1])])]);
    }));
  }
  function drawPanel(panel) {
    var node = DATA.workflow.status.nodes[view.selected];
    if (!node) { panel.hidden = true; return; }
    panel.hidden = false;
    var more = DATA.details[node.id] || {};
    var close = el("button", {"class": "close", title: "close"}, ["\u00d7"]);
    close.addEventListener("click", function () { choose(node.id); });
    panel.appendChild(el("h2", {}, [node.displayName, el("span", {"class": "badge " +
      node.phase}, [node.phase]), close]));
    var started = seconds(node.startedAt), finished = seconds(node.finishedAt);
    var memo = node.memoizationStatus && node.memoizationStatus.hit ? "hit (" +
      node.memoizationStatus.key + ")" : "";
    var attempts = more.attempts || 0;
    panel.appendChild(rows([["name", node.name], ["id", node.id], ["type", node.type],
      ["template", node.templateName], ["phase", node.phase], ["message", node.message],
      ["started", when(node.startedAt)], ["finished", when(node.finishedAt)],
      ["duration", started === null ? "" : short(started, finished)],
      ["attempts", attempts || ""], ["retries", attempts > 1 ? attempts - 1 : (attempts ? 0 : "")],
      ["exit code", more.exitCode], ["memoized", memo]]));
    var inputs = (node.inputs && node.inputs.parameters) || [];
    if (inputs.length) {
      panel.appendChild(el("h3", {}, ["inputs"]));
      panel.appendChild(rows(inputs.map(function (p) { return [p.name, p.value]; })));
    }
    var outputs = node.outputs || {}, pairs = (outputs.parameters || []).map(function (p) {
      return [p.name, p.value];
    });
    (outputs.artifacts || []).forEach(function (a) { pairs.push([a.name + " (artifact)", a.path]); });
    if (outputs.exitCode !== undefined) pairs.push(["exitCode", outputs.exitCode]);
    if (outputs.result !== undefined) pairs.push(["result", outputs.result]);
    if (pairs.length) {
      panel.appendChild(el("h3", {}, ["outputs"]));
      panel.appendChild(rows(pairs));
    }
    if (more.log) {
      panel.appendChild(el("h3", {}, ["log (its end) ", el("a", {href: more.log}, ["whole log"])]));
      var tail = el("pre", {"class": "log-tail"}, [(more.tail || []).join("\n") || "(empty)"]);
      panel.appendChild(tail);
      tail.scrollTop = tail.scrollHeight;  // its end in view
    }
    var template = DATA.templates[node.templateName];
    if (template) {
      panel.appendChild(el("h3", {}, ["template " + node.templateName]));
      panel.appendChild(el("pre", {"class": "template"}, [template]));
    }
  }

  // --- the header, the run list --------------------------------------------------------
  function field(name, value) {
    return el("span", {"class": "field"}, [name + " ", el("b", {}, [value])]);
  }
  function drawRunHeader(top) {
    var w = DATA.workflow, s = w.status;
    top.appendChild(el("h1", {}, [w.metadata.name]));
    top.appendChild(el("span", {"class": "badge " + s.phase, id: "phase"}, [s.phase]));
    top.appendChild(field("started", when(s.startedAt)));
    top.appendChild(field("duration", short(seconds(s.startedAt), seconds(s.finishedAt))));
    top.appendChild(field("progress", s.progress || ""));
    if (s.message) top.appendChild(field("message", s.message));
    var links = el("span", {"class": "links"});
    DATA.links.forEach(function (l) {
      links.appendChild(l.href ? el("a", {href: l.href}, [l.label])
                               : el("span", {"class": "off"}, [l.label]));
    });
    top.appendChild(links);
  }
  function drawList(top, main) {
    top.appendChild(el("h1", {}, ["local runs"]));
    top.appendChild(field("runs", String(DATA.runs.length)));
    if (!DATA.runs.length) { main.appendChild(el("p", {"class": "empty"}, ["No workflows found"])); return; }
    var head = el("tr", {}, ["NAME", "STATUS", "AGE", "DURATION", "PROGRESS", "P/R/C",
                             "MESSAGE"].map(function (h) { return el("th", {}, [h]); }));
    var body = DATA.runs.map(function (r) {
      return el("tr", {"data-name": r.name}, [
        el("td", {}, [el("a", {href: r.href}, [r.name])]),
        el("td", {}, [el("span", {"class": "badge " + r.phase}, [r.phase])]),
        el("td", {}, [short(seconds(r.created), null)]),
        el("td", {}, [short(seconds(r.startedAt), seconds(r.finishedAt))]),
        el("td", {}, [r.progress]), el("td", {}, [r.pods]), el("td", {}, [r.message])]);
    });
    main.appendChild(el("table", {"class": "runs"}, [el("thead", {}, [head]),
                                                    el("tbody", {}, body)]));
  }
  function legend() {
    return el("div", {"class": "legend"}, ["Succeeded", "Failed", "Running", "Pending",
      "Skipped"].map(function (p) { return el("span", {}, [el("i", {"class": p}), p]); }));
  }

  function draw() {
    var top = document.getElementById("top"), main = document.getElementById("main");
    top.textContent = ""; main.textContent = "";
    if (DATA.kind === "list") { drawList(top, main); return; }
    drawRunHeader(top);
    var graph = el("div", {id: "graph"}, [legend()]);
    var panel = el("aside", {id: "panel"});
    main.appendChild(graph); main.appendChild(panel);
    drawGraph(graph);
    drawPanel(panel);
  }

  // --- following a run: the selection and opened groups kept in the address's hash ------
  function remember() {
    var parts = [];
    if (view.selected) parts.push("node=" + encodeURIComponent(view.selected));
    var open = Object.keys(view.expanded);
    if (open.length) parts.push("open=" + open.map(encodeURIComponent).join(","));
    history.replaceState(null, "", parts.length ? "#" + parts.join("&") : location.pathname);
  }
  function restore() {
    location.hash.replace(/^#/, "").split("&").forEach(function (part) {
      var kv = part.split("=");
      if (kv[0] === "node") view.selected = decodeURIComponent(kv[1] || "");
      if (kv[0] === "open") (kv[1] || "").split(",").forEach(function (id) {
        if (id) view.expanded[decodeURIComponent(id)] = true;
      });
    });
  }
  function follow() {
    if (!DATA.live) return;
    setTimeout(function () {
      if (location.protocol === "file:") { location.reload(); return; }  // the file is rewritten
      fetch(location.pathname, {cache: "no-store"}).then(function (r) { return r.text(); })
        .then(function (text) {
          var doc = new DOMParser().parseFromString(text, "text/html");
          DATA = JSON.parse(doc.getElementById("run-data").textContent);
          draw();
          follow();
        }).catch(follow);
    }, 2000);
  }
  restore();
  draw();
  follow();
})();
