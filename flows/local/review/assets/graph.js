// The DAG of a run as the Argo UI lays it out, for page.js: argo-workflows v4.0.5
// ui/src/workflows/components/workflow-dag/workflow-dag.tsx `prepareGraph` (a node per
// Argo node along `children`; a node with more than 3 children shows its first, a
// "N hidden nodes" node and its last until that node is clicked; the exit handler hung
// under the workflow's outbound nodes), graph/collapsible-node.ts (a collapsed node's
// id), and ui/src/shared/components/graph/fast-layout.ts over coffman-graham-sorter.ts
// and dfs-sorter.ts (layers by a depth-first order, each centred). Pure functions of
// the Workflow's nodes: window.ArgoGraph.
(function () {
  "use strict";
  var NODE = 32, GAP = NODE * 1.25, MIN = 1;  // graph-panel: nodeSize 32 for workflows
  // icons.ts: the phases with an icon of their own (others show Pending's)
  var ICONS = {Succeeded: 1, Failed: 1, Error: 1, Skipped: 1, Omitted: 1, Pending: 1,
               Running: 1, Suspended: 1, Collapsed: 1, Memoized: 1};

  function collapsedName(parent, message, type) {
    return JSON.stringify({kind: "collapsed", parent: parent, message: message, type: type});
  }
  function isCollapsed(id) {
    try { return JSON.parse(id).kind === "collapsed"; } catch (e) { return false; }
  }
  function nodeLabel(n) {
    var phase = n.type === "Suspend" && n.phase === "Running" ? "Suspended" : n.phase;
    var hit = n.memoizationStatus && n.memoizationStatus.hit;
    return {label: n.displayName || n.name, genre: n.type, classNames: phase,
            icon: hit ? "Memoized" : (ICONS[phase] ? phase : "Pending")};
  }
  function prepareGraph(all, root, expanded) {
    var nodes = new Map(), edges = [], seen = {};
    function edge(v, w) {
      var key = v + "\n" + w;
      if (v && !seen[key]) { seen[key] = true; edges.push({v: v, w: w}); }
    }
    function children(id) {
      return (all[id] && all[id].children || []).filter(function (c) { return all[c]; });
    }
    function push(id, open, queue) {
      var kids = children(id);
      if (kids.length > 3 && !open) {
        queue.push({name: kids[0], parent: id});
        queue.push({name: collapsedName(id, (kids.length - 2) + " hidden nodes",
                                        all[kids[0]].type), parent: id,
                    hidden: kids.slice(1, kids.length - 1)});
        queue.push({name: kids[kids.length - 1], parent: id});
      } else {
        kids.forEach(function (c) { queue.push({name: c, parent: id}); });
      }
    }
    function traverse(start) {
      var queue = [{name: start, parent: ""}], considered = {}, previous = "";
      while (queue.length) {
        var item = queue.pop();
        if (isCollapsed(item.name)) {
          if (item.name !== previous) {
            nodes.set(item.name, {label: JSON.parse(item.name).message, genre: "Collapsed",
                                  icon: "Collapsed", classNames: "Collapsed",
                                  hidden: item.hidden});
            edge(item.parent, item.name);
            previous = item.name;
          }
          continue;
        }
        var node = all[item.name];
        if (!node) continue;
        nodes.set(item.name, nodeLabel(node));
        edge(item.parent, item.name);
        if (considered[item.name]) continue;
        considered[item.name] = true;
        push(item.name, expanded["*"] || expanded[item.name], queue);
      }
    }
    function outbound(id) {
      var node = all[id];
      if (!node) return [];
      if (node.type === "Pod" || node.type === "Skipped") return [id];
      var found = [];
      (node.outboundNodes || []).forEach(function (o) {
        found = found.concat(all[o] && all[o].type === "Pod" ? [o] : outbound(o));
      });
      return found;
    }
    traverse(root);
    var onExit = Object.keys(all).map(function (k) { return all[k]; })
      .filter(function (n) { return n.name === root + ".onExit"; })[0];
    if (onExit) {
      outbound(root).forEach(function (v) {
        nodes.set(onExit.id, nodeLabel(onExit));
        if (nodes.has(v)) edge(v, onExit.id);
      });
      traverse(onExit.id);
    }
    // Unlike the Argo UI, a group's nodes drawn anyway (reached through another parent)
    // are not counted hidden: each gets its edge from the group's parent, and a group
    // left empty goes.
    nodes.forEach(function (label, id) {
      if (!label.hidden) return;
      var parent = JSON.parse(id).parent;
      var still = label.hidden.filter(function (h) { return !nodes.has(h); });
      label.hidden.forEach(function (h) { if (nodes.has(h)) edge(parent, h); });
      if (!still.length) {
        nodes.delete(id);
        edges = edges.filter(function (e) { return e.w !== id; });
      } else {
        label.label = still.length + " hidden nodes";
        label.hidden = still;
      }
    });
    return {nodes: nodes, edges: edges};
  }

  // --- layout: fast-layout.ts over coffman-graham-sorter.ts and dfs-sorter.ts -------------
  function layout(graph) {
    var out = {}, inc = {};
    graph.nodes.forEach(function (_, id) { out[id] = []; inc[id] = []; });
    graph.edges.forEach(function (e) {
      if (out[e.v] && inc[e.w]) { out[e.v].push(e.w); inc[e.w].push(e.v); }
    });
    var sorted = [], discovered = {}, visiting = {};
    function visit(n) {
      if (discovered[n] || visiting[n]) return;
      visiting[n] = true;
      out[n].forEach(visit);
      delete visiting[n];
      discovered[n] = true;
      sorted.push(n);
    }
    graph.nodes.forEach(function (_, id) { visit(id); });
    sorted.reverse();
    var layers = [], levels = {};
    sorted.forEach(function (n) {
      var above = -1;
      inc[n].forEach(function (d) { if (levels[d] > above) above = levels[d]; });
      var level = above < layers.length - 1 ? above + 1 : -1;
      if (level === -1) { layers.push([]); level = layers.length - 1; }
      layers[level].push(n);
      levels[n] = level;
    });
    var width = 0, height = layers.length * GAP * 2;
    layers.forEach(function (l) { width = Math.max(width, l.length * GAP * 2); });
    layers.forEach(function (level, i) {
      level.forEach(function (n, j) {
        var label = graph.nodes.get(n);
        label.x = j * GAP * 2 + (width / 2 - level.length * GAP);
        label.y = i * GAP * 2 + MIN;
      });
    });
    graph.width = width; graph.height = height;
  }

  window.ArgoGraph = {prepare: prepareGraph, layout: layout, isCollapsed: isCollapsed,
                      NODE: NODE, MIN: MIN};
})();
