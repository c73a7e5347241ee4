// hotspan serve: the rank x step heatmap of /runs/{id}/ranks. It draws what the server
// answers (GET /v1/traces/{id}/rank_steps: hotspan.rank_steps, a list per column) on a
// canvas: a row per rank, a column per step (several steps a pixel on a narrow screen: the
// highest of them), coloured by the metric chosen (blame, wait, step time). A click on a
// cell opens the run's timeline at that rank and step (/runs/{id}?rank=&step=); the highest
// cells are listed below as links too.
(function () {
  'use strict';
  var box = document.getElementById('heatmap');
  if (!box) return;
  var canvas = box.querySelector('canvas');
  var tip = box.querySelector('.tl-tip');
  var status = box.querySelector('.hm-status');
  var select = document.getElementById('heatmap-metric');
  var top = document.getElementById('heatmap-top');
  var LABEL = 70, TOP_CELLS = 20;
  var LABELS = {blame_ns: 'blame', wait_ns: 'wait', step_ns: 'step time'};
  var cells = null, ranks = [], steps = 0, rowOf = {}, layout = null;

  function ms(ns) { return ns >= 1e9 ? (ns / 1e9).toFixed(3) + ' s' : ns >= 1e6 ? (ns / 1e6).toFixed(3) + ' ms' : ns >= 1e3 ? (ns / 1e3).toFixed(2) + ' us' : Math.round(ns) + ' ns'; }
  function link(rank, step) { return '/runs/' + box.dataset.run + '?rank=' + rank + '&step=' + step + '#timeline-view'; }
  // white (low) to dark red (high), through orange
  function colour(f) {
    f = Math.max(0, Math.min(1, f));
    var l = 97 - f * 62, h = 45 - f * 45;
    return 'hsl(' + h.toFixed(0) + ',85%,' + l.toFixed(0) + '%)';
  }

  function draw() {
    if (!cells) return;
    var metric = select.value, values = cells[metric];
    var ratio = window.devicePixelRatio || 1;
    var plot = Math.max(50, canvas.clientWidth - LABEL);
    var cellW = plot / Math.max(steps, 1);
    var rowH = Math.max(2, Math.min(18, Math.floor(600 / Math.max(ranks.length, 1))));
    var height = rowH * ranks.length + 16;
    canvas.style.height = height + 'px';
    canvas.width = Math.round(canvas.clientWidth * ratio);
    canvas.height = Math.round(height * ratio);
    var g = canvas.getContext('2d');
    g.setTransform(ratio, 0, 0, ratio, 0, 0);
    g.clearRect(0, 0, canvas.clientWidth, height);
    // the scale: step time from its lowest to its highest, waits and blame from 0
    var lo = Infinity, hi = -Infinity;
    for (var i = 0; i < values.length; i++) { lo = Math.min(lo, values[i]); hi = Math.max(hi, values[i]); }
    if (metric !== 'step_ns') lo = 0;
    var spread = hi > lo ? hi - lo : 1;
    // several steps a pixel: each pixel column shows the highest of its steps
    var columns = Math.min(steps, Math.max(1, Math.floor(plot)));
    var perColumn = steps / columns;
    var grid = new Float64Array(ranks.length * columns).fill(-Infinity);
    for (i = 0; i < values.length; i++) {
      var r = rowOf[cells.rank[i]], c = Math.min(columns - 1, Math.floor(cells.step[i] / perColumn));
      var k = r * columns + c;
      if (values[i] > grid[k]) grid[k] = values[i];
    }
    var w = plot / columns;
    for (r = 0; r < ranks.length; r++) {
      for (c = 0; c < columns; c++) {
        var v = grid[r * columns + c];
        if (v === -Infinity) continue;
        g.fillStyle = colour((v - lo) / spread);
        g.fillRect(LABEL + c * w, r * rowH, Math.ceil(w), rowH);
      }
    }
    g.fillStyle = '#333';
    g.font = '11px system-ui, sans-serif';
    g.textBaseline = 'middle';
    var every = Math.max(1, Math.ceil(12 / rowH));
    ranks.forEach(function (rank, r) {
      if (r % every === 0) g.fillText('rank ' + rank, 4, r * rowH + rowH / 2);
    });
    g.textBaseline = 'top';
    g.fillText('step 0', LABEL, ranks.length * rowH + 3);
    var last = 'step ' + (steps - 1);
    g.fillText(last, LABEL + plot - g.measureText(last).width, ranks.length * rowH + 3);
    layout = {rowH: rowH, cellW: cellW, plot: plot};
    box.dataset.metric = metric;
    box.dataset.ranks = ranks.length;
    box.dataset.steps = steps;
    box.dataset.cells = values.length;
    box.dataset.drawn = (Number(box.dataset.drawn) || 0) + 1;
    status.textContent = ranks.length + ' ranks × ' + steps + ' steps, coloured by ' + LABELS[metric] +
      ' from ' + ms(lo) + ' to ' + ms(hi) + (perColumn > 1 ? ' (' + perColumn.toFixed(1) + ' steps a pixel: the highest)' : '');
    listTop(metric, values);
  }

  function listTop(metric, values) {
    var order = [];
    for (var i = 0; i < values.length; i++) if (values[i] > 0) order.push(i);
    order.sort(function (a, b) { return values[b] - values[a] || a - b; });
    top.textContent = '';
    order.slice(0, TOP_CELLS).forEach(function (i) {
      var li = document.createElement('li');
      var a = document.createElement('a');
      a.href = link(cells.rank[i], cells.step[i]);
      a.textContent = 'rank ' + cells.rank[i] + ', step ' + cells.step[i];
      a.dataset.rank = cells.rank[i];
      a.dataset.step = cells.step[i];
      li.appendChild(a);
      li.appendChild(document.createTextNode(': ' + LABELS[metric] + ' ' + ms(values[i])));
      top.appendChild(li);
    });
  }

  // the cell under the pointer: {index} into the columns, or null
  function cellAt(event) {
    if (!layout) return null;
    var rect = canvas.getBoundingClientRect();
    var px = event.clientX - rect.left - LABEL, py = event.clientY - rect.top;
    if (px < 0 || px >= layout.plot || py < 0) return null;
    var r = Math.floor(py / layout.rowH), step = Math.floor(px / layout.cellW);
    if (r >= ranks.length || step >= steps) return null;
    var rank = ranks[r];
    var i = cells.first[r] + step;  // a rank's steps are 0, 1, ... in order
    if (i >= cells.rank.length || cells.rank[i] !== rank || cells.step[i] !== step) return null;
    return {i: i, x: px + LABEL, y: py};
  }

  canvas.addEventListener('mousemove', function (event) {
    var hit = cellAt(event);
    tip.hidden = !hit;
    canvas.style.cursor = hit ? 'pointer' : 'default';
    if (!hit) return;
    var i = hit.i;
    tip.textContent = 'rank ' + cells.rank[i] + ', step ' + cells.step[i] + ': step ' + ms(cells.step_ns[i]) +
      ', wait ' + ms(cells.wait_ns[i]) + ', blame ' + ms(cells.blame_ns[i]) +
      (cells.last[i] ? ' (last at ' + cells.last[i] + ' collective' + (cells.last[i] > 1 ? 's' : '') + ')' : '');
    tip.style.left = Math.min(hit.x + 12, canvas.clientWidth - 260) + 'px';
    tip.style.top = (hit.y + 14) + 'px';
  });
  canvas.addEventListener('mouseleave', function () { tip.hidden = true; });
  canvas.addEventListener('click', function (event) {
    var hit = cellAt(event);
    if (hit) window.location.href = link(cells.rank[hit.i], cells.step[hit.i]);
  });
  select.addEventListener('change', function () {
    var url = new URL(window.location.href);
    url.searchParams.set('metric', select.value);
    history.replaceState(null, '', url);
    draw();
  });
  var lastWidth = canvas.clientWidth;
  window.addEventListener('resize', function () {
    if (canvas.clientWidth !== lastWidth) { lastWidth = canvas.clientWidth; draw(); }
  });

  status.textContent = 'loading…';
  fetch(box.dataset.cellsUrl, {credentials: 'same-origin'}).then(function (r) {
    if (!r.ok) throw new Error('HTTP ' + r.status);
    return r.json();
  }).then(function (body) {
    cells = body;
    cells.first = [];
    for (var i = 0; i < body.rank.length; i++) {
      if (!(body.rank[i] in rowOf)) { rowOf[body.rank[i]] = ranks.length; ranks.push(body.rank[i]); cells.first.push(i); }
      steps = Math.max(steps, body.step[i] + 1);
    }
    draw();
  }).catch(function (error) { status.textContent = 'could not load the heatmap: ' + error.message; });
})();
