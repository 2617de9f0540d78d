// Test-only: reads JSON strings, one per line, and parses each the way the Bot API's HTML parse
// mode does, with TDLib's own parseTextEntities (tdweb: TDLib compiled to WebAssembly). Writes one
// JSON object per line: {"text": "...", "entities": n} or {"error": "Can't parse entities: ..."}.
// tdweb 1.8.0 predates block quotes: the caller leaves <blockquote> tags out.
'use strict';
const fs = require('fs');
const path = require('path');
const vm = require('vm');
const readline = require('readline');

const dist = path.join(__dirname, 'node_modules', 'tdweb', 'dist');
const files = fs.readdirSync(dist);
// The worker chunk that instantiates the .wasm (the other big chunk is the asm.js fallback).
const chunk = files.find((f) => /^1\..*\.worker\.js$/.test(f));
const wasm = files.find((f) => f.endsWith('.wasm'));

let modules = null;
global.webpackChunktdweb = (ids, mods) => {
  modules = mods;
};
vm.runInThisContext(
  '(function (require, __dirname, __filename) {' + fs.readFileSync(path.join(dist, chunk), 'utf8') + '\n})',
  {filename: chunk},
).call(global, require, dist, path.join(dist, chunk));
const key = Object.keys(modules).find((k) => modules[k] && modules[k].toString().includes('createTdwebModule'));
const factory = {exports: {}};
modules[key](factory, factory.exports, () => ({}));

factory
  .exports({wasmBinary: fs.readFileSync(path.join(dist, wasm)), print: () => {}, printErr: () => {}})
  .then((td) => {
    const execute = td.cwrap('td_emscripten_execute', 'string', ['string']);
    execute(JSON.stringify({'@type': 'setLogVerbosityLevel', new_verbosity_level: 0}));
    const lines = readline.createInterface({input: process.stdin});
    lines.on('line', (line) => {
      const result = JSON.parse(
        execute(JSON.stringify({'@type': 'parseTextEntities', text: JSON.parse(line), parse_mode: {'@type': 'textParseModeHTML'}})),
      );
      const out = result['@type'] === 'error' ? {error: result.message} : {text: result.text, entities: result.entities.length};
      process.stdout.write(JSON.stringify(out) + '\n');
    });
  });
