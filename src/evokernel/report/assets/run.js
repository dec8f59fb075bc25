// evokernel run report: selection, details, zoom and filters of the evolution tree.
// Data comes from the JSON block #report-data; every string from the run is written with
// textContent (never as markup). Nothing is fetched.
(function () {
  "use strict";
  var D = JSON.parse(document.getElementById("report-data").textContent);
  var nodes = D.nodes, pos = D.pos, svg = document.getElementById("tree-svg");
  var scroller = document.getElementById("tree-scroll");
  var details = document.getElementById("details");
  var tip = document.getElementById("tooltip");
  var byId = {};
  var children = nodes.map(function () { return []; });
  nodes.forEach(function (n, i) {
    byId[n.id] = i;
    n.parents.forEach(function (p) { children[p].push(i); });
  });
  var baseW = +svg.getAttribute("width"), baseH = +svg.getAttribute("height");
  var scale = 1, current = -1;

  function el(tag, attrs) {
    var e = document.createElement(tag);
    if (attrs) Object.keys(attrs).forEach(function (k) {
      if (k === "text") e.textContent = attrs[k]; else e.setAttribute(k, attrs[k]);
    });
    for (var i = 2; i < arguments.length; i++) {
      var c = arguments[i];
      if (c === null || c === undefined) continue;
      e.appendChild(typeof c === "string" ? document.createTextNode(c) : c);
    }
    return e;
  }
  function fmt(v) {
    if (v === null || v === undefined) return "\u2014";
    if (typeof v !== "number") return String(v);
    if (Number.isInteger(v)) return v.toLocaleString("en-US");
    if (Math.abs(v) >= 1000) return Math.round(v).toLocaleString("en-US");
    return String(Number(v.toPrecision(4)));
  }
  function progLink(i) {
    var b = el("button", { "class": "link", type: "button", text: nodes[i].id });
    b.addEventListener("click", function () { select(i, true); });
    return b;
  }
  function table(head, rows) {
    var t = el("table", null, el("tr", null));
    head.forEach(function (h) { t.firstChild.appendChild(el("th", { text: h })); });
    rows.forEach(function (r) {
      var tr = el("tr");
      r.forEach(function (c, j) {
        tr.appendChild(el("td", j > 0 && typeof c === "number" || c === null ? { "class": "num", text: fmt(c) } : { text: String(c) }));
      });
      t.appendChild(tr);
    });
    return t;
  }
  function diffBlock(text) {
    var pre = el("pre", { "class": "diff" });
    text.split("\n").forEach(function (line) {
      var cls = "";
      if (line.indexOf("+++") === 0 || line.indexOf("---") === 0) cls = "meta";
      else if (line.charAt(0) === "+") cls = "add";
      else if (line.charAt(0) === "-") cls = "del";
      else if (line.indexOf("@@") === 0) cls = "hunk";
      pre.appendChild(el("span", cls ? { "class": cls, text: line } : { text: line }));
    });
    return pre;
  }

  function render(i) {
    var n = nodes[i];
    details.textContent = "";
    var title = el("h3", null, n.id, el("span", { "class": "badge o-" + n.outcome, text: D.outcomes[n.outcome] || n.outcome }));
    details.appendChild(title);
    var dl = el("dl");
    function row(k, v) { if (v === null || v === undefined || v === "") return; dl.appendChild(el("dt", { text: k })); dl.appendChild(el("dd", null, v)); }
    row("island", String(n.island));
    row("iteration", n.it < 0 ? "seed" : String(n.it));
    row("generation", String(n.gen));
    row("mutation", n.kind);
    row("status", n.status);
    row("fitness", fmt(n.fit) + (n.fit !== null && n.pfit !== null ? "  (parent " + fmt(n.pfit) + ", \u0394 " + fmt(n.fit - n.pfit) + ")" : ""));
    if (n.parents.length || n.evicted.length) {
      var ps = el("span");
      n.parents.forEach(function (p) { ps.appendChild(progLink(p)); });
      n.evicted.forEach(function (id) { ps.appendChild(el("span", { text: id + " (no longer in the database) " })); });
      row(n.parents.length + n.evicted.length > 1 ? "parents" : "parent", ps);
    }
    if (children[i].length) {
      var cs = el("span");
      children[i].slice(0, 24).forEach(function (c) { cs.appendChild(progLink(c)); });
      if (children[i].length > 24) cs.appendChild(el("span", { text: "+" + (children[i].length - 24) + " more" }));
      row("children", cs);
    }
    if (n.reused) row("evaluation", "reused from " + n.reused);
    row("evaluated in", n.wall === null ? null : fmt(n.wall) + " s");
    if (n.tokens) row("LLM", fmt(n.tokens) + " tokens, $" + (n.cost || 0).toFixed(4) + " (" + n.models.join(", ") + ")");
    if (n.src) row("source", el("a", { href: n.src, text: n.src }));
    details.appendChild(dl);
    if (n.desc) details.appendChild(el("p", { text: n.desc }));
    if (n.reasons.length) {
      details.appendChild(el("h3", { text: "Reasons" }));
      var ul = el("ul");
      n.reasons.forEach(function (r) { ul.appendChild(el("li", { "class": "mono", text: r })); });
      details.appendChild(ul);
    }
    if (n.insight) details.appendChild(el("p", { "class": "note", text: n.insight }));
    var regimes = Object.keys(n.regimes || {});
    if (regimes.length) {
      details.appendChild(el("h3", { text: "Speedup by regime (95% lower bound)" }));
      details.appendChild(table(["regime", "speedup"], regimes.map(function (k) { return [k, n.regimes[k]]; })));
    }
    if (n.scen.length) {
      details.appendChild(el("h3", { text: "Scenarios" }));
      details.appendChild(table(["scenario", "speedup", "95% low", "95% high", "% roofline", "flags"],
        n.scen.map(function (s) { return [s.name, s.speedup, s.lo, s.hi, s.roof, s.flags.join(", ")]; })));
    }
    var ph = Object.keys(n.phases || {});
    if (ph.length) {
      details.appendChild(el("h3", { text: "Evaluator phases (s)" }));
      details.appendChild(table(["phase", "seconds"], ph.map(function (k) { return [k, n.phases[k]]; })));
    }
    var mk = Object.keys(n.metrics || {});
    if (mk.length) {
      details.appendChild(el("h3", { text: "Metrics" }));
      details.appendChild(table(["metric", "value"], mk.map(function (k) {
        var v = n.metrics[k];
        return [k, typeof v === "number" || v === null ? v : JSON.stringify(v)];
      })));
    }
    var ak = Object.keys(n.artifacts || {});
    if (ak.length) {
      details.appendChild(el("h3", { text: "Evaluator artifacts" }));
      ak.forEach(function (k) {
        details.appendChild(el("h4", { text: k }));
        details.appendChild(el("pre", { text: n.artifacts[k] }));
      });
    }
    if (n.logs) { details.appendChild(el("h3", { text: "Output (tail)" })); details.appendChild(el("pre", { text: n.logs })); }
    var head = el("h3", { id: "diff-title" });
    details.appendChild(head);
    if (n.diff === null) {
      head.textContent = "Diff";
      details.appendChild(el("p", { "class": "none", text: n.evicted.length ? "its parent is no longer in the database" : "no program to compare" }));
    } else if (n.diff === "") {
      head.textContent = "Diff against " + (n.parents.length ? nodes[n.parents[0]].id : "its parent");
      details.appendChild(el("p", { "class": "none", text: "identical to its parent" }));
    } else {
      head.textContent = n.parents.length ? "Diff against " + nodes[n.parents[0]].id : "Source (no parent)";
      var d = diffBlock(n.diff); d.id = "diff"; details.appendChild(d);
    }
  }

  function lineage(i) {
    var d = "", seen = {};
    while (i >= 0 && !seen[i]) {
      seen[i] = 1;
      d += (d ? "L" : "M") + pos[2 * i] + " " + pos[2 * i + 1];
      i = nodes[i].parents.length ? nodes[i].parents[0] : -1;
    }
    return d;
  }

  function reveal(i) {
    var x = pos[2 * i] * scale, y = pos[2 * i + 1] * scale;
    var r = scroller.getBoundingClientRect();
    if (x < scroller.scrollLeft + 40 || x > scroller.scrollLeft + r.width - 40) scroller.scrollLeft = x - r.width / 2;
    if (y < scroller.scrollTop + 20 || y > scroller.scrollTop + r.height - 20) scroller.scrollTop = y - r.height / 2;
  }

  function select(i, scroll) {
    if (i < 0 || i >= nodes.length) return;
    current = i;
    var ring = document.getElementById("sel-ring");
    ring.setAttribute("cx", pos[2 * i]); ring.setAttribute("cy", pos[2 * i + 1]);
    ring.style.display = "";
    document.getElementById("lineage").setAttribute("d", lineage(i));
    render(i);
    if (history.replaceState) history.replaceState(null, "", "#program=" + encodeURIComponent(nodes[i].id));
    if (scroll) reveal(i);
  }

  function zoom(f) {
    scale = Math.max(0.05, Math.min(4, f));
    svg.setAttribute("width", Math.round(baseW * scale));
    svg.setAttribute("height", Math.round(baseH * scale));
    if (current >= 0) reveal(current);
  }

  svg.addEventListener("click", function (e) {
    var t = e.target.closest("[data-i]");
    if (t) select(+t.getAttribute("data-i"), false);
  });
  svg.addEventListener("mouseover", function (e) {
    var t = e.target.closest("[data-i]");
    if (!t) { tip.style.display = "none"; return; }
    var n = nodes[+t.getAttribute("data-i")];
    tip.textContent = n.id + " \u00b7 " + (D.outcomes[n.outcome] || n.outcome) + " \u00b7 fitness " + fmt(n.fit) + (n.desc ? " \u00b7 " + n.desc.slice(0, 120) : "");
    tip.style.display = "block";
  });
  svg.addEventListener("mousemove", function (e) { tip.style.left = e.clientX + 12 + "px"; tip.style.top = e.clientY + 12 + "px"; });
  svg.addEventListener("mouseleave", function () { tip.style.display = "none"; });
  scroller.addEventListener("wheel", function (e) {
    if (!e.ctrlKey) return;
    e.preventDefault();
    zoom(scale * (e.deltaY < 0 ? 1.25 : 0.8));
  }, { passive: false });
  document.getElementById("zoom-in").addEventListener("click", function () { zoom(scale * 1.25); });
  document.getElementById("zoom-out").addEventListener("click", function () { zoom(scale * 0.8); });
  document.getElementById("zoom-fit").addEventListener("click", function () {
    zoom(Math.min(1, (scroller.clientWidth - 4) / baseW));
  });
  document.getElementById("zoom-reset").addEventListener("click", function () { zoom(1); });
  document.getElementById("goto-best").addEventListener("click", function () { if (D.best >= 0) select(D.best, true); });
  var find = document.getElementById("find");
  find.addEventListener("keydown", function (e) {
    if (e.key !== "Enter") return;
    var q = find.value.trim(), i = byId[q];
    if (i === undefined) {
      for (var k = 0; k < nodes.length; k++) if (nodes[k].id.indexOf(q) === 0) { i = k; break; }
    }
    find.setCustomValidity(i === undefined ? "no such program" : "");
    if (i !== undefined) select(i, true);
  });
  Array.prototype.forEach.call(document.querySelectorAll(".legend input[data-outcome]"), function (box) {
    box.addEventListener("change", function () {
      svg.classList.toggle("hide-" + box.getAttribute("data-outcome"), !box.checked);
    });
  });

  var start = D.best >= 0 ? D.best : 0;
  var m = /^#program=(.+)$/.exec(location.hash);
  if (m) {
    var want = decodeURIComponent(m[1]);
    if (want in byId) start = byId[want];
  }
  if (nodes.length) select(start, true);
})();
