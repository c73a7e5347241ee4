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

  // Open in Perfetto UI (ui.perfetto.dev, or the Perfetto UI the server names with --perfetto-ui).
  var button = document.getElementById('perfetto');
  var status = document.getElementById('perfetto-status');
  function say(text) { if (status) status.textContent = text; }
  if (button) {
    var UI = button.dataset.ui, ORIGIN = new URL(UI).origin;
    var open = function () {
      // Open the window first, in the click itself (a popup blocker allows that), then fetch.
      var ui = window.open(UI);
      if (!ui) { say('the browser blocked the new window: allow pop-ups for this page'); return; }
      say('fetching the trace…');
      var buffer = null, ready = false, timer = null;
      function send() {
        if (!buffer || !ready) return;
        ui.postMessage({perfetto: {buffer: buffer, title: button.dataset.title,
                                   fileName: button.dataset.title.replace(/[^\w.-]+/g, '_') + '.pftrace'}}, ORIGIN);
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
      fetch(button.dataset.trace, {credentials: 'same-origin'}).then(function (response) {
        if (!response.ok) throw new Error('HTTP ' + response.status);
        return response.arrayBuffer();
      }).then(function (data) {
        buffer = data;
        say(ready ? '' : 'waiting for Perfetto UI…');
        send();
      }).catch(function (error) {
        clearInterval(timer);
        say('could not fetch the trace: ' + error.message);
      });
    };
    button.addEventListener('click', open);
    // A link to the run page ending in #perfetto opens it there at once (where pop-ups are allowed).
    if (location.hash === '#perfetto') open();
  }
})();
