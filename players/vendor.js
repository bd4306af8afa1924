// Copies the two pinned players' browser builds from node_modules into
// vendor/ (not committed), the directory player.html loads them from.
// Runs as npm's postinstall, so `npm ci --prefix players` is the whole setup.
'use strict';
const fs = require('fs');
const path = require('path');

const here = __dirname;
const files = [
  // dash.js: the UMD build for current browsers (exposes window.dashjs).
  ['node_modules/dashjs/dist/modern/umd/dash.all.min.js', 'dash.all.min.js'],
  // Shaka Player: the DASH-only compiled build (exposes window.shaka).
  ['node_modules/shaka-player/dist/shaka-player.dash.js', 'shaka-player.dash.js'],
];
const out = path.join(here, 'vendor');
fs.mkdirSync(out, { recursive: true });
const versions = {};
for (const pkg of ['dashjs', 'shaka-player']) {
  versions[pkg] = JSON.parse(fs.readFileSync(path.join(here, 'node_modules', pkg, 'package.json'), 'utf8')).version;
}
for (const [from, to] of files) {
  fs.copyFileSync(path.join(here, from), path.join(out, to));
}
fs.writeFileSync(path.join(out, 'versions.json'), JSON.stringify(versions, null, 2) + '\n');
console.log(`vendored ${files.map(f => f[1]).join(', ')} into ${out}: ${JSON.stringify(versions)}`);
