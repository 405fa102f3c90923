/* The step view: steps drawn in full on a canvas, one row per GPU stream and per CPU thread (NVTX levels, CUDA
   calls), GPU idle stretches shaded and labelled; hover for names and durations; zoom and pan. Installed once per
   page as window.nsightStepView; each view's data is a JSON script element (render/step_view.py writes both).
   Why a canvas and not Vega: docs/report.md (a step of 6,000 events pans at frame rate here, where Vega redraws
   its scenegraph in ~100 ms). */
(function () {
  "use strict";
  var LINKED = 4, GUTTER = 190, ROW = 18, AXIS = 22, IDLE_ROW = 20, FONT = "11px system-ui,-apple-system,Segoe UI,sans-serif";
  var PALETTE = ["#5b8def", "#e8710a", "#1e8e3e", "#d93025", "#9334e6", "#12b5cb", "#e52592", "#7cb342",
                 "#f9ab00", "#795548", "#607d8b", "#c2185b"];

  function hash(text) {
    var h = 0;
    for (var i = 0; i < text.length; i++) { h = (h * 31 + text.charCodeAt(i)) | 0; }
    return Math.abs(h);
  }

  function duration(ns) {
    var a = Math.abs(ns);
    if (a >= 1e9) { return (ns / 1e9).toFixed(3) + " s"; }
    if (a >= 1e6) { return (ns / 1e6).toFixed(3) + " ms"; }
    if (a >= 1e3) { return (ns / 1e3).toFixed(2) + " \u00b5s"; }
    return Math.round(ns) + " ns";
  }

  function niceStep(span, pixels) {
    var raw = span / Math.max(pixels / 90, 1), power = Math.pow(10, Math.floor(Math.log10(raw)));
    var unit = [1, 2, 5, 10].find(function (m) { return m * power >= raw; });
    return unit * power;
  }

  /* One panel: a step's canvas. ROWS: labels; events as columns (r row, s start, d duration, n name, k kind). */
  function Panel(view, step, element) {
    this.view = view; this.step = step; this.element = element;
    this.canvas = element.querySelector("canvas");
    this.idleRow = view.data.clock === "gpu" ? IDLE_ROW : 0;  // the CPU's clock has no GPU idle to label
    this.height = AXIS + this.idleRow + step.rows.length * ROW + 4;
    this.byRow = step.rows.map(function () { return []; });
    for (var i = 0; i < step.ev.r.length; i++) { this.byRow[step.ev.r[i]].push(i); }
    this.highlight = -1;
    var panel = this;
    this.canvas.addEventListener("mousemove", function (event) { panel.hover(event); });
    this.canvas.addEventListener("mouseleave", function () { view.tooltip.style.display = "none"; });
  }

  Panel.prototype.x = function (ns) {
    var width = this.canvas.clientWidth - GUTTER;
    return GUTTER + (ns - this.v0) / (this.v1 - this.v0) * width;
  };

  Panel.prototype.draw = function () {
    var canvas = this.canvas, step = this.step, data = this.view.data, ratio = window.devicePixelRatio || 1;
    var width = canvas.clientWidth;
    if (canvas.width !== Math.round(width * ratio) || canvas.height !== Math.round(this.height * ratio)) {
      canvas.width = Math.round(width * ratio); canvas.height = Math.round(this.height * ratio);
      canvas.style.height = this.height + "px";
    }
    var g = canvas.getContext("2d");
    g.setTransform(ratio, 0, 0, ratio, 0, 0);
    g.clearRect(0, 0, width, this.height);
    g.font = FONT; g.textBaseline = "middle";
    var top = AXIS + this.idleRow, v0 = this.v0, v1 = this.v1, gpuRows = step.gpu_rows;
    // Row bands and labels.
    for (var r = 0; r < step.rows.length; r++) {
      g.fillStyle = step.rows[r].lane === "gpu" ? (r % 2 ? "#f3f7ee" : "#fbfdf8") : (r % 2 ? "#f1f4f9" : "#fafbfd");
      g.fillRect(GUTTER, top + r * ROW, width - GUTTER, ROW);
    }
    g.save(); g.beginPath(); g.rect(GUTTER, 0, width - GUTTER, this.height); g.clip();
    // The step's GPU window over the GPU rows and its range over the CPU rows: outside them greyed, their edges
    // marked under the axis (where the host runs ahead, the range comes well before the GPU window).
    var spans = [[step.gpu, top, gpuRows, "#3e6b00"], [step.cpu, top + gpuRows * ROW, step.rows.length - gpuRows,
                                                         "#1f4e8c"]];
    spans.forEach(function (span, index) {
      if (!index && data.clock !== "gpu") { return; }  // on the CPU's clock the step is its range alone
      var a = this.x(span[0][0]), b = this.x(span[0][1]);
      g.fillStyle = "rgba(90,100,110,0.16)";
      if (span[2]) {
        g.fillRect(GUTTER, span[1], Math.max(a - GUTTER, 0), span[2] * ROW);
        g.fillRect(b, span[1], Math.max(width - b, 0), span[2] * ROW);
      }
      g.fillStyle = span[3];
      g.fillRect(a, AXIS - 5 + index * 3, Math.max(b - a, 1), 2);
    }, this);
    // Idle stretches: shaded over the GPU rows, labelled in the idle row.
    for (var i = 0; i < step.idle.length; i++) {
      var stretch = step.idle[i], x0 = this.x(stretch[0]), x1 = this.x(stretch[0] + stretch[1]);
      if (x1 < GUTTER || x0 > width) { continue; }
      var color = data.parts[stretch[2]].color, w = Math.max(x1 - x0, 1);
      g.fillStyle = color; g.globalAlpha = 0.85; g.fillRect(x0, AXIS + 2, w, this.idleRow - 4);
      g.globalAlpha = 0.18; g.fillRect(x0, top, w, gpuRows * ROW); g.globalAlpha = 1;
      var label = data.labels[stretch[3]];
      if (w > 30) {
        g.fillStyle = "#fff"; g.fillText(fit(g, label, w - 6), Math.max(x0, GUTTER) + 3, AXIS + this.idleRow / 2);
      }
    }
    // Events: at least a pixel wide; one rect per pixel column per row at most (a dense row stays cheap).
    for (r = 0; r < step.rows.length; r++) {
      var indices = this.byRow[r], y = top + r * ROW + 2, lastPixel = -1;
      for (var j = 0; j < indices.length; j++) {
        var e = indices[j], s = step.ev.s[e], d = step.ev.d[e];
        if (s + d < v0 || s > v1) { continue; }
        var ex0 = this.x(s), ex1 = Math.max(this.x(s + d), ex0 + 1);
        if (ex1 - ex0 < 2 && Math.floor(ex0) === lastPixel) { continue; }
        lastPixel = Math.floor(ex0);
        var kind = data.kinds[step.ev.k[e]], name = data.names[step.ev.n[e]];
        g.fillStyle = kind === "nvtx" ? PALETTE[hash(name) % PALETTE.length] : data.kind_colors[step.ev.k[e]];
        if (kind === "kernel") { g.globalAlpha = 0.65 + (hash(name) % 8) / 23; }
        g.fillRect(ex0, y, ex1 - ex0, ROW - 4); g.globalAlpha = 1;
        if (e === this.highlight) {
          g.strokeStyle = "#d93025"; g.lineWidth = 2; g.strokeRect(ex0 - 1, y - 1, ex1 - ex0 + 2, ROW - 2);
        }
        if (ex1 - ex0 > 36) {
          g.fillStyle = kind === "cuda_api" ? "#1f2933" : "#fff";
          g.fillText(fit(g, data.short[step.ev.n[e]], ex1 - ex0 - 4), Math.max(ex0, GUTTER) + 2, y + (ROW - 4) / 2);
        }
      }
    }
    // The time axis, since the step's drawn start.
    var tick = niceStep(v1 - v0, width - GUTTER);
    g.fillStyle = "#52606d"; g.strokeStyle = "#d9e2ec"; g.lineWidth = 1;
    for (var t = Math.ceil(v0 / tick) * tick; t <= v1; t += tick) {
      var tx = Math.round(this.x(t)) + 0.5;
      g.beginPath(); g.moveTo(tx, AXIS - 6); g.lineTo(tx, this.height); g.stroke();
      g.fillText(duration(t), tx + 3, AXIS / 2);
    }
    g.restore();
    g.fillStyle = "#1f2933";
    if (this.idleRow) { g.fillText("GPU idle", 6, AXIS + this.idleRow / 2); }
    for (r = 0; r < step.rows.length; r++) {
      g.fillStyle = step.rows[r].lane === "gpu" ? "#3e6b00" : "#1f4e8c";
      g.fillText(fit(g, step.rows[r].label, GUTTER - 10), 6, top + r * ROW + ROW / 2);
    }
  };

  function fit(g, text, width) {
    if (g.measureText(text).width <= width) { return text; }
    var low = 0, high = text.length;
    while (low < high) {
      var mid = (low + high + 1) >> 1;
      if (g.measureText(text.slice(0, mid) + "\u2026").width <= width) { low = mid; } else { high = mid - 1; }
    }
    return low ? text.slice(0, low) + "\u2026" : "";
  }

  /* What is under the pointer: an event of the row, else an idle stretch. */
  Panel.prototype.at = function (px, py) {
    var step = this.step, top = AXIS + this.idleRow, ns = this.v0 + (px - GUTTER) / (this.canvas.clientWidth - GUTTER)
      * (this.v1 - this.v0), slack = 3 * (this.v1 - this.v0) / (this.canvas.clientWidth - GUTTER);
    if (px < GUTTER) { return null; }
    if (py >= AXIS && py < top) {
      for (var i = 0; i < step.idle.length; i++) {
        var st = step.idle[i];
        if (ns >= st[0] - slack && ns <= st[0] + st[1] + slack) { return {idle: st}; }
      }
      return null;
    }
    var row = Math.floor((py - top) / ROW);
    if (row < 0 || row >= step.rows.length) { return null; }
    var best = null, indices = this.byRow[row];
    for (var j = 0; j < indices.length; j++) {
      var e = indices[j], s = step.ev.s[e], d = step.ev.d[e];
      if (ns >= s - slack && ns <= s + d + slack && (best === null || d < step.ev.d[best])) { best = e; }
    }
    return best === null ? null : {event: best};
  };

  Panel.prototype.hover = function (event) {
    var box = this.canvas.getBoundingClientRect(), hit = this.at(event.clientX - box.left, event.clientY - box.top);
    var tip = this.view.tooltip, data = this.view.data, step = this.step;
    if (!hit) { tip.style.display = "none"; return; }
    var lines;
    if (hit.idle) {
      lines = [data.labels[hit.idle[3]], "GPU idle " + duration(hit.idle[1]), "at " + duration(hit.idle[0])];
    } else {
      var e = hit.event;
      lines = [data.names[step.ev.n[e]], data.kind_labels[step.ev.k[e]] + " " + duration(step.ev.d[e]),
               "at " + duration(step.ev.s[e]) + " \u00b7 " + step.rows[step.ev.r[e]].label];
      if (step.ev.b && step.ev.b[e] !== null) { lines.push(step.ev.b[e]); }
    }
    tip.textContent = "";
    lines.forEach(function (line, index) {
      var div = document.createElement("div");
      div.textContent = line;
      if (!index) { div.style.fontWeight = "600"; }
      tip.appendChild(div);
    });
    var host = this.view.root.getBoundingClientRect();
    tip.style.display = "block";
    tip.style.left = Math.min(event.clientX - host.left + 12, host.width - 320) + "px";
    tip.style.top = (event.clientY - host.top + 14) + "px";
  };

  /* A view: its panels share one time axis (ns since each step's drawn start) and zoom together. */
  function View(root) {
    this.root = root;
    this.data = JSON.parse(document.getElementById(root.getAttribute("data-nsr-steps")).textContent);
    // One time axis for the steps when their spans are alike (the slowest within LINKED x the median's): zoom one,
    // zoom all. Else each panel has its own, so a short median step is not a sliver beside a long outlier.
    var spans = this.data.steps.filter(function (s) { return !s.hidden; }).map(function (s) { return s.span; });
    this.linked = Math.max.apply(null, spans) <= LINKED * Math.min.apply(null, spans);
    this.full = Math.max.apply(null, spans.concat([1]));
    this.tooltip = root.querySelector(".nsr-sv-tip");
    var view = this;
    this.panels = Array.prototype.map.call(root.querySelectorAll(".nsr-sv-panel"), function (element, index) {
      var panel = new Panel(view, view.data.steps[index], element);
      panel.full = view.linked ? Math.max(view.full, panel.step.span) : panel.step.span;  // an evidence step may be longer
      panel.v0 = 0; panel.v1 = panel.full;
      return panel;
    });
    this.panels.forEach(function (panel) {
      var canvas = panel.canvas, dragging = null;
      canvas.addEventListener("wheel", function (event) {
        if (event.ctrlKey || event.metaKey || event.altKey) {
          event.preventDefault();
          view.zoomAt(panel, event.clientX - canvas.getBoundingClientRect().left, Math.pow(1.0015, event.deltaY));
        } else if (event.shiftKey || Math.abs(event.deltaX) > Math.abs(event.deltaY)) {
          event.preventDefault();
          view.pan(panel, (event.deltaX || event.deltaY) / (canvas.clientWidth - GUTTER));
        }
      }, {passive: false});
      canvas.addEventListener("mousedown", function (event) { dragging = event.clientX; });
      window.addEventListener("mouseup", function () { dragging = null; });
      window.addEventListener("mousemove", function (event) {
        if (dragging === null) { return; }
        view.pan(panel, (dragging - event.clientX) / (canvas.clientWidth - GUTTER));
        dragging = event.clientX;
      });
      canvas.addEventListener("dblclick", function () { view.reset(view.linked ? null : panel); });
    });
    root.querySelectorAll("[data-nsr-zoom]").forEach(function (button) {
      button.addEventListener("click", function () {
        var factor = button.getAttribute("data-nsr-zoom");
        if (factor === "reset") { view.reset(); return; }
        (view.linked ? view.panels.slice(0, 1) : view.panels).forEach(function (panel) {
          view.zoomAt(panel, GUTTER + (panel.canvas.clientWidth - GUTTER) / 2, parseFloat(factor));
        });
      });
    });
    root.querySelectorAll("[data-nsr-idle]").forEach(function (item) {
      item.addEventListener("click", function () {
        var at = item.getAttribute("data-nsr-idle").split(" ").map(Number);
        view.show(at[0], at[1], at[2]);
      });
    });
    window.addEventListener("resize", function () { view.draw(); });
    this.draw();
  }

  View.prototype.setView = function (panel, v0, v1) {
    var span = Math.max(v1 - v0, 1000), slack = panel.full * 0.05;
    v0 = Math.max(Math.min(v0, panel.full + slack - span), -slack);
    (this.linked ? this.panels : [panel]).forEach(function (other) { other.v0 = v0; other.v1 = v0 + span; });
    this.draw(panel);
  };

  View.prototype.zoomAt = function (panel, px, factor) {
    var width = panel.canvas.clientWidth - GUTTER, at = panel.v0 + (px - GUTTER) / width * (panel.v1 - panel.v0);
    this.setView(panel, at - (at - panel.v0) * factor, at + (panel.v1 - at) * factor);
  };

  View.prototype.pan = function (panel, fraction) {
    var span = panel.v1 - panel.v0;
    this.setView(panel, panel.v0 + fraction * span, panel.v1 + fraction * span);
  };

  View.prototype.reset = function (panel) {
    (panel ? [panel] : this.panels).forEach(function (one) { this.setView(one, 0, one.full); }, this);
  };

  View.prototype.draw = function (changed) {
    this.panels.forEach(function (panel) { if (panel.element.offsetParent !== null) { panel.draw(); } });
    var panel = changed || this.panels[0];
    this.root.setAttribute("data-nsr-view", Math.round(panel.v0) + " " + Math.round(panel.v1));
  };

  /* Bring [START, START + LENGTH) of panel INDEX into view (with room around it), showing the panel if hidden. */
  View.prototype.show = function (index, start, length, event) {
    var panel = this.panels[index];
    panel.element.hidden = false;
    panel.highlight = event === undefined ? -1 : event;
    var margin = Math.max(length * 0.25, (panel.v1 - panel.v0) * 0.02, 2000);
    this.setView(panel, start - margin, start + length + margin);
    this.root.setAttribute("data-nsr-focus", panel.step.step + " " + (event === undefined ? "" : event));
    panel.element.scrollIntoView({block: "nearest"});
  };

  /* A finding's evidence: its step, its event (STARTNS on the capture's clock) or its name in the median step. */
  View.prototype.focus = function (where) {
    var panels = this.panels, index = -1, event;
    if (where.start !== null) {
      index = panels.findIndex(function (p) { return where.start >= p.step.t0 && where.start < p.step.t0 + p.step.span; });
    }
    if (index < 0 && where.step !== null) {
      index = panels.findIndex(function (p) { return p.step.step === where.step; });
    }
    var panel = panels[Math.max(index, 0)], step = panel.step, names = this.data.names, kinds = this.data.kinds;
    var wanted = {step: null, range: "nvtx", kernel: "kernel", copy: "memcpy", api: "cuda_api"}[where.kind] || null;
    for (var e = 0; e < step.ev.s.length && wanted; e++) {
      var at = step.ev.s[e] + step.t0;
      if (where.start !== null ? (at === where.start && kinds[step.ev.k[e]] === wanted)
          : (kinds[step.ev.k[e]] === wanted && where.name && names[step.ev.n[e]] === where.name)) { event = e; break; }
    }
    if (event !== undefined) {
      this.show(Math.max(index, 0), step.ev.s[event], step.ev.d[event], event);
    } else {
      this.show(Math.max(index, 0), 0, step.span);
    }
  };

  function install(root) {
    root.querySelectorAll("[data-nsr-steps]").forEach(function (element) {
      if (element.nsrView) { return; }
      element.nsrView = new View(element);
      var section = element.closest(".nsr-section") || root;
      section.querySelectorAll("[data-nsr-where]").forEach(function (evidence) {
        var show = function () { element.nsrView.focus(JSON.parse(evidence.getAttribute("data-nsr-where"))); };
        evidence.addEventListener("click", show);
        evidence.addEventListener("keydown", function (event) {
          if (event.key === "Enter" || event.key === " ") { event.preventDefault(); show(); }
        });
      });
    });
  }

  window.nsightStepView = {install: install};
})();
