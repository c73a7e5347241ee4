// hotspan serve: sortable tables, the run list's filter, the timeline frame's height, and
// "Open in Perfetto UI" (the postMessage protocol ui.perfetto.dev documents for opening a
// trace from another page: open it, PING until it answers PONG, then post the trace).
(function () {
  'use strict';

  // Sortable tables: a click on a heading sorts by that column (numbers by data-v), again to reverse.
  document.querySelectorAll('table.sortable').forEach(function (table) {
    table.querySelectorAll('th').forEach(function (th, col) {
      th.addEventListener('click', function () {
        var body = table.tBodies[0];
        var rows = Array.prototype.slice.call(body.rows);
        var down = th.dataset.dir !== 'desc';
        table.querySelectorAll('th').forEach(function (other) { delete other.dataset.dir; });
        th.dataset.dir = down ? 'desc' : 'asc';
        function key(row) {
          var cell = row.cells[col];
          if (!cell) return '';
          if (cell.dataset.v !== undefined) return cell.dataset.v === '' ? -Infinity : +cell.dataset.v;
          return cell.textContent.toLowerCase();
        }
        rows.sort(function (a, b) {
          var x = key(a), y = key(b), o = x < y ? -1 : x > y ? 1 : 0;
          return down ? -o : o;
        });
        rows.forEach(function (row) { body.appendChild(row); });
      });
    });
  });

  // The run list's filter: rows whose path holds the text (as the server does for ?q=).
  var filter = document.getElementById('filter');
  if (filter) {
    filter.addEventListener('input', function () {
      var text = filter.value.toLowerCase();
      document.querySelectorAll('#runs tbody tr').forEach(function (row) {
        row.hidden = text !== '' && row.dataset.name.toLowerCase().indexOf(text) < 0;
      });
    });
  }

  // The timeline and flame frames (same origin) as tall as their content.
  ['timeline', 'flame', 'diff-flame'].forEach(function (id) {
    var frame = document.getElementById(id);
    if (!frame) return;
    frame.addEventListener('load', function () {
      try {
        var doc = frame.contentDocument;
        frame.style.height = Math.min(doc.documentElement.scrollHeight + 8, 2000) + 'px';
      } catch (e) { /* not reachable: keep the default height */ }
    });
  });

  // Open a trace in Perfetto UI (ui.perfetto.dev, or the one the server names with
  // --perfetto-ui): open the UI's window in the click itself (a popup blocker allows that),
  // fetch the trace, PING until the UI answers PONG, post it. A 413 (a window of more spans
  // than open in Perfetto UI) closes the window and says so. The timeline's "Open this window
  // in Perfetto" (timeline.js) calls it too.
  function openInPerfetto(UI, url, title, say) {
    var ORIGIN = new URL(UI).origin;
    var ui = window.open(UI);
    if (!ui) { say('the browser blocked the new window: allow pop-ups for this page'); return; }
    say('fetching the trace…');
    var buffer = null, ready = false, timer = null;
    function send() {
      if (!buffer || !ready) return;
      ui.postMessage({perfetto: {buffer: buffer, title: title,
                                 fileName: title.replace(/[^\w.-]+/g, '_') + '.pftrace'}}, ORIGIN);
      say('opened in Perfetto UI');
    }
    function onMessage(event) {
      if (event.source !== ui || event.data !== 'PONG') return;
      ready = true;
      clearInterval(timer);
      window.removeEventListener('message', onMessage);
      send();
    }
    window.addEventListener('message', onMessage);
    // The channel is not buffered: PING until the UI's listener is up and answers PONG.
    timer = setInterval(function () { ui.postMessage('PING', ORIGIN); }, 50);
    fetch(url, {credentials: 'same-origin'}).then(function (response) {
      if (response.status === 413) {
        return response.json().then(function (body) {
          var error = new Error('this window holds ' + body.spans.toLocaleString('en') +
            ' spans: zoom in to at most ' + body.limit.toLocaleString('en'));
          error.said = true;
          throw error;
        });
      }
      if (!response.ok) throw new Error('HTTP ' + response.status);
      return response.arrayBuffer();
    }).then(function (data) {
      buffer = data;
      say(ready ? '' : 'waiting for Perfetto UI…');
      send();
    }).catch(function (error) {
      clearInterval(timer);
      window.removeEventListener('message', onMessage);
      try { ui.close(); } catch (e) { /* gone already */ }
      say(error.said ? error.message : 'could not fetch the trace: ' + error.message);
    });
  }
  window.hotspanOpenInPerfetto = openInPerfetto;

  var button = document.getElementById('perfetto');
  var status = document.getElementById('perfetto-status');
  function say(text) { if (status) status.textContent = text; }
  if (button) {
    var open = function () {
      openInPerfetto(button.dataset.ui, button.dataset.trace, button.dataset.title, say);
    };
    button.addEventListener('click', open);
    // A link to the run page ending in #perfetto opens it there at once (where pop-ups are allowed).
    if (location.hash === '#perfetto') open();
  }
  // The timeline's button (timeline.js keeps its data-trace the window shown): #perfetto-window
  // opens the whole run's first view at once, as #perfetto does.
  var windowButton = document.getElementById('perfetto-window');
  if (windowButton && location.hash === '#perfetto-window') windowButton.click();
})();
