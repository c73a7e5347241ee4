// hotspan serve: the timeline of a run of any size. It asks the server for what the canvas
// can show (GET /v1/traces/{id}/timeline?start_ns=&end_ns=&width=): per track, the spans a
// pixel long or more, exactly, and the shorter ones summarised per pixel. Wheel zooms around
// the pointer, drag pans, double click shows the whole run again. Times travel as BigInt
// offsets from the run's start: epoch nanoseconds are beyond a double's exact integers.
// A page opened from a cell of the ranks page (?rank=&step=) starts on that step's window
// (data-focus-start/-end, the server's) with that rank's tracks first and highlighted
// (data-focus-rank). "critical path" draws each step's critical path across ranks over the
// tracks (GET /v1/traces/{id}/critical_path?start_ns=&end_ns=): a band on the rank's first
// track per segment, a line where the path moves to another rank.
(function () {
  'use strict';
  var box = document.getElementById('timeline-view');
  if (!box) return;
  var canvas = box.querySelector('canvas');
  var tip = box.querySelector('.tl-tip');
  var status = box.querySelector('.tl-status');
  var ROW = 16, GAP = 6, LABEL = 150;
  var runStart = BigInt(box.dataset.start), runEnd = BigInt(box.dataset.end);
  if (runEnd <= runStart) runEnd = runStart + 1n;
  // The window, as Numbers of ns from the run's start (exact below 2**53 ns: 104 days).
  var view = {lo: 0, hi: Number(runEnd - runStart)};
  var focusRank = box.dataset.focusRank === undefined ? null : Number(box.dataset.focusRank);
  if (box.dataset.focusStart && box.dataset.focusEnd) {
    // the step's window, with 2% of it either side so that its edges show
    var f0 = Number(BigInt(box.dataset.focusStart) - runStart), f1 = Number(BigInt(box.dataset.focusEnd) - runStart);
    var margin = Math.max(1, (f1 - f0) * 0.02);
    view = {lo: f0 - margin, hi: f1 + margin};
  }
  var answer = null, asked = 0, timer = null, drawn = [];
  var criticalBox = document.getElementById('critical-path');
  var critical = null;  // {segments} of the window last asked for
  var CRITICAL = '#d50000';
  // Counter lanes under the spans (GET /v1/traces/{id}/counters, same window and width):
  // a step line per counter, process and rank, scaled to its own min..max.
  var LANE = 36, counters = null;
  function fetchCounters(start, end, width, ticket) {
    var url = '/v1/traces/' + box.dataset.run + '/counters?start_ns=' + start + '&end_ns=' + end + '&width=' + width;
    fetch(url, {credentials: 'same-origin'}).then(function (r) {
      if (!r.ok) throw new Error('HTTP ' + r.status);
      return r.json();
    }).then(function (body) {
      if (ticket !== asked) return;
      counters = {body: body};
      box.dataset.counterLanes = body.lanes.length;
      draw();
    }).catch(function () { counters = null; box.dataset.counterLanes = 0; });
  }
  function countersHeight() { return counters ? counters.body.lanes.length * (LANE + GAP) : 0; }
  function fmt(v) { return v === null ? '–' : Math.abs(v) >= 1e6 ? v.toExponential(3) : String(Math.round(v * 1000) / 1000); }
  function drawCounters(g, y, x) {
    if (!counters) return;
    var body = counters.body, base = Number(BigInt(body.start_ns) - runStart), per = body.ns_per_pixel;
    body.lanes.forEach(function (lane) {
      g.fillStyle = '#eef3ee';
      g.fillRect(0, y, canvas.clientWidth, LANE);
      g.fillStyle = '#333';
      var label = lane.name + ' · rank ' + lane.rank;
      g.fillText(label.length > 24 ? label.slice(0, 23) + '…' : label, 4, y + LANE / 2);
      var lo = lane.min, hi = lane.max;
      if (lo === null) { y += LANE + GAP; return; }
      if (hi === lo) { hi = lo + 1; }
      function vy(v) { return y + LANE - 3 - (v - lo) / (hi - lo) * (LANE - 6); }
      g.save();
      g.beginPath();
      g.rect(LABEL, y, plotWidth(), LANE);
      g.clip();
      g.strokeStyle = colour(lane.name);
      g.fillStyle = colour(lane.name);
      g.lineWidth = 1.5;
      g.beginPath();
      var value = lane.before;
      if (value !== null) g.moveTo(LABEL, vy(value));
      lane.pixels.forEach(function (p) {
        var left = x(base + p.x * per), w = Math.max(1, per * (plotWidth() / (view.hi - view.lo)));
        if (value !== null) g.lineTo(left, vy(value));
        if (p.min !== null && p.max !== null && p.max > p.min) g.fillRect(left, vy(p.max), w, Math.max(1, vy(p.min) - vy(p.max)));
        if (p.last !== null) { value = p.last; g.moveTo(left, vy(value)); }
        drawn.push({x: left, y: y, w: w, h: LANE, text: lane.name + ': ' + fmt(p.last) + ' (min ' + fmt(p.min) + ', max ' + fmt(p.max) + ')'});
      });
      if (value !== null) g.lineTo(LABEL + plotWidth(), vy(value));
      g.stroke();
      g.restore();
      g.fillStyle = '#666';
      g.fillText(fmt(lane.max), LABEL - 60, y + 6);
      y += LANE + GAP;
    });
  }

  // a name's colour, made once (a whole-run view paints 100,000 pixels); no prototype, so a
  // span named "constructor" gets its colour too
  var colours = Object.create(null);
  function colour(name) {
    var known = colours[name];
    if (known !== undefined) return known;
    var h = 0;
    for (var i = 0; i < name.length; i++) h = (h * 31 + name.charCodeAt(i)) >>> 0;
    return (colours[name] = 'hsl(' + (h % 360) + ',55%,' + (55 + (h >> 9) % 15) + '%)');
  }
  function ms(ns) { return ns >= 1e9 ? (ns / 1e9).toFixed(3) + ' s' : ns >= 1e6 ? (ns / 1e6).toFixed(3) + ' ms' : ns >= 1e3 ? (ns / 1e3).toFixed(2) + ' us' : Math.round(ns) + ' ns'; }
  function plotWidth() { return Math.max(50, canvas.clientWidth - LABEL); }

  // The window shown, epoch ns: [start, end).
  function shown() {
    var start = runStart + BigInt(Math.floor(view.lo)), end = runStart + BigInt(Math.ceil(view.hi));
    if (end <= start) end = start + 1n;
    return {start: start, end: end};
  }
  // "Open this window in Perfetto": the spans overlapping the window shown, exported by the
  // server (download?start_ns=&end_ns=), posted to Perfetto UI as serve.js's button does; a
  // window of more spans than open there is refused (413) and said.
  var perfetto = document.getElementById('perfetto-window');
  var perfettoStatus = document.getElementById('perfetto-window-status');
  function windowTrace() {
    var w = shown();
    return '/v1/traces/' + box.dataset.run + '/download?format=pftrace&start_ns=' + w.start + '&end_ns=' + w.end;
  }
  if (perfetto) {
    perfetto.dataset.trace = windowTrace();
    perfetto.addEventListener('click', function () {
      perfetto.dataset.trace = windowTrace();
      var w = shown();
      window.hotspanOpenInPerfetto(perfetto.dataset.ui, perfetto.dataset.trace,
        perfetto.dataset.title + ' [' + ms(Number(w.start - runStart)) + ' +' + ms(Number(w.end - w.start)) + ']',
        function (text) { perfettoStatus.textContent = text; });
    });
  }

  function fetchView() {
    var width = Math.round(plotWidth());
    var w = shown(), start = w.start, end = w.end;
    if (perfetto) perfetto.dataset.trace = windowTrace();
    var ticket = ++asked;
    status.textContent = 'loading…';
    var url = '/v1/traces/' + box.dataset.run + '/timeline?start_ns=' + start + '&end_ns=' + end + '&width=' + width;
    var path = criticalBox && criticalBox.checked ? fetchCritical(start, end) : Promise.resolve(null);
    // counters come from the server (the offline report embeds the spans' answer only)
    if (!window.hotspanTimelineData) fetchCounters(start, end, width, ticket);
    ask(url, start, end).then(function (body) {
      return path.then(function (segments) { return {body: body, segments: segments}; });
    }).then(function (got) {
      var body = got.body;
      if (ticket !== asked) return;  // a later pan or zoom asked again
      answer = {body: body, lo: view.lo, hi: view.hi};
      critical = got.segments ? {segments: got.segments} : null;
      box.dataset.window = start + ',' + end;
      draw();
      var spans = 0, pixels = 0;
      body.tracks.forEach(function (t) { spans += t.spans.length; pixels += t.pixels.length; });
      box.dataset.tracks = body.tracks.length;
      box.dataset.spans = spans;
      box.dataset.pixels = pixels;
      box.dataset.drawn = ++box.drawnCount;
      status.textContent = body.tracks.length + ' tracks · ' + spans + ' spans exact, ' + pixels +
        ' pixels summarised · window ' + ms(view.hi - view.lo) + ' · wheel: zoom, drag: pan, double click: whole run';
    }).catch(function (error) { status.textContent = 'could not load the timeline: ' + error.message; });
  }
  // Where the answer comes from: the server, or, in the offline HTML report, the answer the
  // library computed for the whole run and embedded in the page (window.hotspanTimelineData:
  // the same shape, finer than a screen), of which the window's part is taken.
  function ask(url, start, end) {
    var embedded = window.hotspanTimelineData;
    if (!embedded) {
      return fetch(url, {credentials: 'same-origin'}).then(function (r) {
        if (!r.ok) throw new Error('HTTP ' + r.status);
        return r.json();
      });
    }
    var lo = Number(start), hi = Number(end);
    var base = embedded.start_ns, per = embedded.ns_per_pixel;
    return Promise.resolve({
      start_ns: base, end_ns: embedded.end_ns, width: embedded.width, ns_per_pixel: per,
      tracks: embedded.tracks.map(function (t) {
        var out = {};
        for (var k in t) out[k] = t[k];
        out.spans = t.spans.filter(function (s) { return s.start_ns < hi && s.end_ns >= lo; });
        out.pixels = t.pixels.filter(function (p) {
          var at = base + p.x * per;
          return at < hi && at + per >= lo;
        });
        return out;
      })
    });
  }
  box.drawnCount = 0;
  function fetchCritical(start, end) {
    var url = '/v1/traces/' + box.dataset.run + '/critical_path?start_ns=' + start + '&end_ns=' + end;
    // a run whose critical path cannot be found (no steps, say) still shows its timeline
    return fetch(url, {credentials: 'same-origin'}).then(function (r) {
      if (!r.ok) throw new Error('HTTP ' + r.status);
      return r.json();
    }).then(function (body) { return body.segments; }).catch(function (error) {
      box.dataset.criticalError = error.message;
      return [];
    });
  }
  if (criticalBox) {
    criticalBox.addEventListener('change', function () {
      if (!criticalBox.checked) { critical = null; delete box.dataset.critical; draw(); return; }
      fetchView();
    });
  }
  function later() { clearTimeout(timer); timer = setTimeout(fetchView, 120); }

  function draw() {
    if (!answer) return;
    var body = answer.body, ratio = window.devicePixelRatio || 1;
    var rows = [];
    body.tracks.forEach(function (t) {
      var depth = 0;
      t.spans.forEach(function (s) { depth = Math.max(depth, s.depth); });
      t.pixels.forEach(function (p) { depth = Math.max(depth, p.depth); });
      rows.push({track: t, depth: depth + 1, focus: focusRank !== null && t.rank === focusRank});
    });
    // the focused rank's tracks first (a stable sort: the server's order otherwise)
    if (focusRank !== null) {
      rows = rows.filter(function (r) { return r.focus; }).concat(rows.filter(function (r) { return !r.focus; }));
    }
    var height = (rows.reduce(function (h, r) { return h + r.depth * ROW + GAP; }, 0) || ROW) + countersHeight();
    canvas.style.height = height + 'px';
    canvas.width = Math.round(canvas.clientWidth * ratio);
    canvas.height = Math.round(height * ratio);
    var g = canvas.getContext('2d');
    g.setTransform(ratio, 0, 0, ratio, 0, 0);
    g.clearRect(0, 0, canvas.clientWidth, height);
    g.font = '11px system-ui, sans-serif';
    g.textBaseline = 'middle';
    // What the answer covers, mapped to the window shown now (old data, moved, until the new arrives).
    var base = Number(BigInt(body.start_ns) - runStart), per = body.ns_per_pixel;
    var scale = plotWidth() / (view.hi - view.lo);
    function x(ns) { return LABEL + (ns - view.lo) * scale; }
    drawn = [];
    var y = 0, firstRow = {};
    rows.forEach(function (row) {
      var t = row.track;
      if (!(t.rank in firstRow)) firstRow[t.rank] = {y: y, height: row.depth * ROW};
      g.fillStyle = row.focus ? '#fff3c4' : '#f4f6f8';
      g.fillRect(0, y, canvas.clientWidth, row.depth * ROW);
      g.fillStyle = '#333';
      g.font = (row.focus ? 'bold ' : '') + '11px system-ui, sans-serif';
      var label = t.label || ('rank ' + t.rank + ' · ' + t.thread_id + (t.lane ? ' · lane ' + t.lane : ''));
      g.fillText(label.length > 24 ? label.slice(0, 23) + '…' : label, 4, y + ROW / 2);
      g.font = '11px system-ui, sans-serif';
      g.save();
      g.beginPath();
      g.rect(LABEL, y, plotWidth(), row.depth * ROW);
      g.clip();
      var fill = null, alpha = null;  // the canvas's state set only when it changes
      t.pixels.forEach(function (p) {
        var left = x(base + p.x * per), w = Math.max(1, per * scale);
        var f = p.colour || colour(p.name), a = Math.min(1, 0.35 + p.count / 8);
        if (f !== fill) g.fillStyle = fill = f;
        if (a !== alpha) g.globalAlpha = alpha = a;
        g.fillRect(left, y + p.depth * ROW, w, ROW - 1);
        // the tip's text made when hovered: a whole-run view has a hundred thousand pixels
        drawn.push({x: left, y: y + p.depth * ROW, w: w, pixel: p});
      });
      g.globalAlpha = 1;
      t.spans.forEach(function (s) {
        var s0 = Number(BigInt(s.start_ns) - runStart), s1 = Number(BigInt(s.end_ns) - runStart);
        var left = x(s0), w = Math.max(1, (s1 - s0) * scale);
        var top = y + s.depth * ROW;
        g.fillStyle = s.colour || colour(s.name);
        g.fillRect(left, top, w, ROW - 1);
        if (s.error) {  // a span that ended with an exception (the report marks them)
          g.strokeStyle = '#d62728';
          g.lineWidth = 2;
          g.strokeRect(left + 1, top + 1, Math.max(1, w - 2), ROW - 3);
        }
        if (w > 30) {
          g.fillStyle = '#111';
          g.fillText(s.name, Math.max(left, LABEL) + 3, top + ROW / 2, w - 6);
        }
        drawn.push({x: left, y: top, w: w, text: s.name + ' · ' + ms(s1 - s0) + (s.error ? ' · ended with an exception' : '')});
      });
      g.restore();
      y += row.depth * ROW + GAP;
    });
    drawCounters(g, y, x);
    box.dataset.firstRank = rows.length ? rows[0].track.rank : '';
    box.dataset.focusTracks = rows.filter(function (r) { return r.focus; }).length;
    if (critical) drawCritical(g, firstRow, x);
  }

  // The critical path over the tracks: per segment a band (translucent, outlined) on its
  // rank's first track, a line from one segment's end to the next one's start on another rank.
  function drawCritical(g, firstRow, x) {
    var shown = 0, prev = null;
    g.save();
    g.beginPath();
    g.rect(LABEL, 0, plotWidth(), canvas.clientHeight || 1e6);
    g.clip();
    critical.segments.forEach(function (s) {
      var at = firstRow[s.rank];
      if (!at) { prev = null; return; }
      var s0 = Number(BigInt(s.start_ns) - runStart), s1 = Number(BigInt(s.end_ns) - runStart);
      var left = x(s0), w = Math.max(2, x(s1) - left);
      g.globalAlpha = 0.28;
      g.fillStyle = CRITICAL;
      g.fillRect(left, at.y, w, at.height);
      g.globalAlpha = 1;
      g.fillRect(left, at.y, w, 3);
      g.fillRect(left, at.y + at.height - 3, w, 3);
      if (prev && prev.rank !== s.rank && prev.step === s.step) {
        g.strokeStyle = CRITICAL;
        g.lineWidth = 2;
        g.beginPath();
        g.moveTo(prev.x, prev.y + 1);
        g.lineTo(left, at.y + 1);
        g.stroke();
      }
      prev = {rank: s.rank, step: s.step, x: left + w, y: at.y};
      if (left + w >= LABEL && left <= LABEL + plotWidth()) shown++;
      drawn.push({x: left, y: at.y, w: w, text: 'critical path · step ' + s.step + ' · rank ' + s.rank + ' · ' + s.name + ' · ' + ms(s1 - s0)});
    });
    g.restore();
    box.dataset.critical = shown;
  }

  canvas.addEventListener('wheel', function (event) {
    event.preventDefault();
    var rect = canvas.getBoundingClientRect();
    var at = view.lo + (event.clientX - rect.left - LABEL) / plotWidth() * (view.hi - view.lo);
    var factor = event.deltaY > 0 ? 1.25 : 0.8;
    var span = Math.max(1000, (view.hi - view.lo) * factor);
    view.lo = at - (at - view.lo) * span / (view.hi - view.lo);
    view.hi = view.lo + span;
    draw();
    later();
  }, {passive: false});
  var dragging = null;
  canvas.addEventListener('mousedown', function (event) { dragging = {x: event.clientX, lo: view.lo, hi: view.hi}; });
  window.addEventListener('mouseup', function () { dragging = null; });
  canvas.addEventListener('mousemove', function (event) {
    var rect = canvas.getBoundingClientRect();
    var px = event.clientX - rect.left, py = event.clientY - rect.top;
    if (dragging) {
      var shift = (event.clientX - dragging.x) / plotWidth() * (dragging.hi - dragging.lo);
      view.lo = dragging.lo - shift;
      view.hi = dragging.hi - shift;
      draw();
      later();
      return;
    }
    var hit = null;
    for (var i = drawn.length - 1; i >= 0; i--) {
      var d = drawn[i];
      if (px >= d.x && px <= d.x + d.w && py >= d.y && py < d.y + (d.h || ROW)) { hit = d; break; }
    }
    tip.hidden = !hit;
    if (hit) {
      var p = hit.pixel;
      tip.textContent = p ? p.count + ' spans, most time in ' + p.name + ' (' + ms(p.time_ns) + ')' : hit.text;
      tip.style.left = Math.min(px + 12, canvas.clientWidth - 260) + 'px';
      tip.style.top = (py + 14) + 'px';
    }
  });
  canvas.addEventListener('mouseleave', function () { tip.hidden = true; });
  canvas.addEventListener('dblclick', function () { view = {lo: 0, hi: Number(runEnd - runStart)}; fetchView(); });
  var lastWidth = canvas.clientWidth;
  window.addEventListener('resize', function () {
    if (canvas.clientWidth !== lastWidth) { lastWidth = canvas.clientWidth; draw(); later(); }
  });
  fetchView();
})();
