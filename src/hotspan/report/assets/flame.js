// hotspan's flame view: an icicle of self time by stack (the roots on top, each frame as wide
// as its total time), drawn from the tree hotspan.analysis.flamegraph computes. Click a frame
// to zoom into it (its ancestors stay above, click one to zoom out); hover for its total and
// self time and their shares of the whole. No library, nothing fetched: the data sits in the
// page, in a <script type="application/json"> inside each .hs-flame element.
(function () {
  'use strict';
  var ROW = 18;
  function ns(v) {
    var a = Math.abs(v);
    if (a >= 1e9) return (v / 1e9).toFixed(3) + ' s';
    if (a >= 1e6) return (v / 1e6).toFixed(2) + ' ms';
    if (a >= 1e3) return (v / 1e3).toFixed(2) + ' us';
    return v + ' ns';
  }
  function pct(x, of) { return of > 0 ? (100 * x / of).toFixed(1) + '%' : '-'; }

  function setUp(box) {
    if (box.dataset.ready) return;
    box.dataset.ready = '1';
    var data = JSON.parse(box.querySelector('script.fl-data').textContent);
    var view = box.querySelector('.fl-view'), crumbs = box.querySelector('.fl-crumbs');
    var tip = box.querySelector('.fl-tip');
    var trees = {}, current = null, focus = 0;
    Object.keys(data.trees).forEach(function (key) {
      var t = data.trees[key], n = t.p.length, kids = [];
      for (var i = 0; i < n; i++) kids.push([]);
      for (i = 1; i < n; i++) kids[t.p[i]].push(i);
      // Widest first, as flame graphs order siblings by weight ("left heavy").
      kids.forEach(function (list) { list.sort(function (a, b) { return t.t[b] - t.t[a]; }); });
      t.kids = kids;
      trees[key] = t;
    });

    function colour(t, node) {
      if (t.col) return t.col[node];  // a flame graph of a change: coloured by its change
      if (t.k[node] !== 2) return '#d0d0d0';
      var c = t.c[node];
      return c < 0 ? data.none : (data.colours[t.categories[c]] || '#bbb');
    }
    function describe(t, node) {
      var all = t.t[0];
      var name = t.k[node] === 0 ? 'all' : t.label[node];
      var cat = t.c[node] >= 0 ? t.categories[t.c[node]] : (t.k[node] === 2 ? '(none)' : null);
      var s = name + (cat ? '\ncategory: ' + cat : '');
      s += '\ntotal: ' + ns(t.t[node]) + ' (' + pct(t.t[node], all) + ' of all)';
      s += '\nself: ' + ns(t.s[node]) + ' (' + pct(t.s[node], all) + ' of all)';
      if (t.n[node]) s += '\nspans: ' + t.n[node].toLocaleString();
      if (t.d) s += '\nbase run: ' + ns(t.b[node]) + (t.d[node] ? ' (change: ' + t.d[node] + ')' : '');
      return s;
    }
    function frame(t, node, x, w, y, cls) {
      var d = document.createElement('div');
      d.className = 'fr' + (cls ? ' ' + cls : '');
      d.dataset.node = node;
      d.dataset.label = t.k[node] === 0 ? 'all' : t.label[node];
      d.style.left = x + 'px';
      d.style.width = Math.max(w, 1) + 'px';
      d.style.top = y + 'px';
      d.style.background = colour(t, node);
      if (t.d && t.d[node]) {  // a change: its title says it (+52%, new)
        d.title = d.dataset.label + ': ' + t.d[node];
        d.dataset.change = t.d[node];
      }
      if (w > 30) d.textContent = d.dataset.label;
      view.appendChild(d);
    }
    function draw() {
      var t = trees[current], width = view.clientWidth || 1000;
      view.textContent = '';
      var chain = [];
      for (var a = focus; a >= 0; a = t.p[a]) chain.unshift(a);
      chain.forEach(function (node, row) { frame(t, node, 0, width, row * ROW, node === focus ? '' : 'anc'); });
      var base = chain.length - 1, deepest = base, total = t.t[focus] || 1;
      var queue = [[focus, 0, base]];
      while (queue.length) {
        var item = queue.pop(), node = item[0], x = item[1], row = item[2];
        t.kids[node].forEach(function (kid) {
          var w = t.t[kid] / total * width;
          if (w >= 0.5) {
            frame(t, kid, x, w, (row + 1) * ROW, '');
            deepest = Math.max(deepest, row + 1);
            queue.push([kid, x, row + 1]);
          }
          x += w;
        });
      }
      view.style.height = (deepest + 1) * ROW + 'px';
      crumbs.textContent = '';
      chain.forEach(function (node, i) {
        if (i) crumbs.appendChild(document.createTextNode(' › '));
        var a = document.createElement(node === focus ? 'span' : 'a');
        a.textContent = t.k[node] === 0 ? 'all' : t.label[node];
        if (node !== focus) a.addEventListener('click', function () { zoom(node); });
        crumbs.appendChild(a);
      });
      box.querySelectorAll('.fl-bar button').forEach(function (b) { b.classList.toggle('on', b.dataset.tree === current); });
    }
    function zoom(node) {
      focus = node;
      draw();
      if (box.id) history.replaceState(null, '', '#' + box.id + '=' + current + ':' + node);
    }
    function use(key) { current = key; focus = 0; draw(); }

    box.querySelectorAll('.fl-bar button').forEach(function (b) {
      b.addEventListener('click', function () { use(b.dataset.tree); });
    });
    view.addEventListener('click', function (e) {
      var d = e.target.closest('.fr');
      if (d) zoom(+d.dataset.node);
    });
    view.addEventListener('mousemove', function (e) {
      var d = e.target.closest('.fr');
      if (!d) { tip.style.display = 'none'; return; }
      tip.textContent = describe(trees[current], +d.dataset.node);
      tip.style.display = 'block';
      var w = tip.offsetWidth, h = tip.offsetHeight;
      tip.style.left = Math.max(4, Math.min(e.clientX + 12, innerWidth - w - 4)) + 'px';
      tip.style.top = (e.clientY + 14 + h > innerHeight ? e.clientY - h - 8 : e.clientY + 14) + 'px';
    });
    view.addEventListener('mouseleave', function () { tip.style.display = 'none'; });

    // A link may name the view and the frame to show zoomed: #<id>=<tree>:<node>.
    var m = box.id && new RegExp('^#' + box.id + '=(\\w+):(\\d+)$').exec(location.hash);
    current = data.initial;
    if (m && trees[m[1]] && +m[2] < trees[m[1]].p.length) { current = m[1]; focus = +m[2]; }
    draw();
    window.addEventListener('resize', draw);
  }

  document.querySelectorAll('.hs-flame').forEach(setUp);
})();
