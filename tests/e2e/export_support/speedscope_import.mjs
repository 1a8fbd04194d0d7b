// Import a speedscope file with speedscope's own importer, under node, and print what it
// imported as JSON: per profile its name, unit, total weight and every call-tree path with
// self weight (frames as `name@file:line`).
//
// The published `speedscope` package ships only the browser bundle (dist/release/*.js, one
// IIFE). Its file-type dispatcher hands a file whose `$schema` is speedscope's to the speedscope
// importer; this script finds that importer's (minified) name in the dispatcher's code, and the
// lazy module initialiser that follows it, exposes both on `globalThis` just before the bundle
// starts the web app, runs the bundle in this process (with inert stand-ins for the browser
// globals its top level touches) and calls the importer on the file, as the app does.
//
// usage: node speedscope_import.mjs SPEEDSCOPE_PACKAGE_DIR FILE
import fs from 'node:fs';
import path from 'node:path';
import vm from 'node:vm';

const [pkg, file] = process.argv.slice(2);
const dist = path.join(pkg, 'dist', 'release');
const bundle = fs.readdirSync(dist).find((f) => /^speedscope-.*\.js$/.test(f));
if (!bundle) throw new Error(`no speedscope bundle in ${dist}`);
let code = fs.readFileSync(path.join(dist, bundle), 'utf8');

const dispatch = code.match(/console\.log\("Importing as speedscope json file"\),(\w+)\(\w+\)/);
if (!dispatch) throw new Error('speedscope importer not found in the bundle');
const importer = dispatch[1];
const init = code.slice(code.indexOf(`function ${importer}(`)).match(/var (\w+)=re\(\(\)=>\{/);
if (!init) throw new Error('speedscope importer initialiser not found in the bundle');
const appStart = code.lastIndexOf('console.log(`speedscope v');
if (appStart < 0) throw new Error('speedscope app start not found in the bundle');
code = `${code.slice(0, appStart)}globalThis.__speedscope={init:${init[1]},importer:${importer}};})();`;

// Inert stand-ins: any property of them is another stand-in, any call returns one.
const inert = new Proxy(function () {}, {
  get: (_, key) => (key === Symbol.toPrimitive ? () => '' : inert),
  apply: () => inert,
  construct: () => inert,
});
for (const name of ['window', 'document', 'navigator', 'localStorage', 'location']) {
  if (!(name in globalThis)) globalThis[name] = inert;
}
const log = console.log;
console.log = () => {};
vm.runInThisContext(code, { filename: bundle });
globalThis.__speedscope.init();
const group = globalThis.__speedscope.importer(JSON.parse(fs.readFileSync(file, 'utf8')));
console.log = log;

const frameName = (f) => `${f.name}@${f.file ?? ''}:${f.line ?? ''}`;
const profiles = group.profiles.map((p) => {
  const stacks = [];
  const walk = (node, prefix) => {
    const here = node.frame && node.parent ? [...prefix, frameName(node.frame)] : prefix;
    if (node.getSelfWeight() > 0) stacks.push([here, node.getSelfWeight()]);
    for (const child of node.children) walk(child, here);
  };
  walk(p.getAppendOrderCalltreeRoot(), []);
  return { name: p.getName(), unit: p.getWeightUnit(), total: p.getTotalWeight(), stacks };
});
process.stdout.write(JSON.stringify({ name: group.name, profiles }) + '\n');
