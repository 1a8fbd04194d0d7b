// hpcview-rs report: renders the embedded data (element #data, written by correlate's
// report::payload) as tabs of tree tables, a flame graph, a source pane and a per-thread chart.
//
// Data (#data): {command, metrics: [{name, unit, total, samples}], threads: [label],
//   derived?: [{name, formula, expr}], scopes: [nodes per view], files: [{path, lines: {line: [incl.., excl..]}, text?, skipped?}],
//   objects?: [{n label, k kind, size?, b blocks, s samples per metric, p share per metric}],
//   timeline?: SVG markup, memmap?: SVG markup, asm?: [listing as `hpcview-rs --asm --json`]}
//   (the last four shown in panes of their own, when present; asm.js draws the last)
// and one element per view (#view-0 top-down, #view-1 callers, #view-2 flat), parsed when the
// view is first shown: {name, nodes: [{k kind, n label, full?, s call site?, f file?, l line?,
//   i incl per metric, e excl per metric, c children, th? [[thread, incl.., excl..]]}]}.
// Only the rows of expanded scopes are in the document; everything is rebuilt from `state`.
'use strict';

const D = JSON.parse(document.getElementById('data').textContent);
const M = D.metrics.length;
const DERIVED = D.derived || [];
const $ = (id) => document.getElementById(id);

const state = {
  view: 0,
  pane: null,
  objectSort: 0,
  sort: { m: 0, excl: false },
  thread: -1,
  threshold: 1,
  search: '',
  matches: new Set(),
  reveal: new Set(),
  views: [],
};

/** View `v`'s data, parsed on first use. */
const views = [];
function viewData(v) {
  if (!views[v]) views[v] = JSON.parse($('view-' + v).textContent);
  return views[v];
}

/** Show view `v`; the first time, with its hot path expanded. */
function showView(v) {
  state.view = v;
  if (state.views[v]) return;
  state.views[v] = { parent: parents(viewData(v).nodes), expanded: new Set([0]), selected: 0, zoom: 0 };
  expandHot();
}

/** Each node's parent (-1 for the root). */
function parents(nodes) {
  const p = new Int32Array(nodes.length).fill(-1);
  nodes.forEach((n, id) => n.c.forEach((c) => { p[c] = id; }));
  return p;
}

const nodesOf = () => viewData(state.view).nodes;
const viewState = () => state.views[state.view];

/** Inclusive (or exclusive) value of metric m at node n for the selected thread(s). */
function value(n, m, excl) {
  if (state.thread < 0) return excl ? n.e[m] : n.i[m];
  const row = (n.th || []).find((r) => r[0] === state.thread);
  return row ? row[1 + (excl ? M : 0) + m] : 0;
}

const total = (m) => value(nodesOf()[0], m, false);
const sortValue = (n) => value(n, state.sort.m, state.sort.excl);
const costOf = (n) => value(n, state.sort.m, false);

/** `x` with `d` decimals as Rust's `{:.d}` (and so the text view) writes it: like toFixed, but an
 *  exact tie (x = m / 2^(d+1), m odd) goes to the even digit, where toFixed rounds up. */
function fixed(x, d) {
  const y = x * 2 ** (d + 1);
  if (!Number.isInteger(y) || y % 2 === 0) return x.toFixed(d);
  const s = x.toFixed(d + 1);
  return Number(s[s.length - 2]) % 2 === 0 ? s.slice(0, -1) : x.toFixed(d);
}

function percent(v, t) {
  return t > 0 ? fixed((v * 100) / t, 1) + '%' : '-';
}

/** An absolute value as the text view prints it: seconds for ns, k/M/G counts otherwise. */
function absolute(v, unit) {
  if (unit === 'ns') {
    const s = v / 1e9;
    return s >= 1 ? fixed(s, 3) + 's' : fixed(s * 1e3, 3) + 'ms';
  }
  if (v < 1e4) return String(v);
  if (v < 1e7) return fixed(v / 1e3, 1) + 'k';
  if (v < 1e10) return fixed(v / 1e6, 1) + 'M';
  return fixed(v / 1e9, 1) + 'G';
}

/** Children of `id` in the current sort order (the data's order is inclusive, first metric). */
function children(id) {
  const nodes = nodesOf();
  const kids = nodes[id].c.slice();
  if (state.sort.m !== 0 || state.sort.excl || state.thread >= 0) {
    kids.sort((a, b) => sortValue(nodes[b]) - sortValue(nodes[a]));
  }
  return kids;
}

/** The rows to show: expanded scopes' children above the threshold (and those leading to search
 *  matches or the selection), the rest as one "(N more)" row. */
function visibleRows() {
  const nodes = nodesOf();
  const vs = viewState();
  const limit = (total(state.sort.m) * state.threshold) / 100;
  const rows = [];
  const stack = [{ id: 0, depth: 0 }];
  while (stack.length) {
    const row = stack.pop();
    rows.push(row);
    if (row.more || !vs.expanded.has(row.id)) continue;
    const shown = [];
    const folded = [];
    for (const c of children(row.id)) {
      const keep = costOf(nodes[c]) >= limit && costOf(nodes[c]) > 0;
      (keep || state.reveal.has(c) || c === vs.selected ? shown : folded).push(c);
    }
    if (folded.length) stack.push({ more: folded, depth: row.depth + 1 });
    for (let i = shown.length - 1; i >= 0; i--) stack.push({ id: shown[i], depth: row.depth + 1 });
  }
  return rows;
}

function cells(tr, incl, excl) {
  for (let m = 0; m < M; m++) {
    const t = total(m);
    for (const [v, isExcl] of [[incl[m], false], [excl[m], true]]) {
      const blank = isExcl && v === 0;
      tr.append(td(blank ? '' : percent(v, t), 'pct' + (isExcl ? ' excl' : ' incl')));
      tr.append(td(blank ? '' : absolute(v, D.metrics[m].unit), 'abs'));
    }
  }
  for (const d of DERIVED) {
    for (const [v, cls] of [[incl, 'derived incl'], [excl, 'derived excl']]) {
      const r = derive(d.expr, v);
      tr.append(td(r === null ? '' : derivedNumber(r), cls));
    }
  }
}

/** Derived metric formula `e` (`D.derived[].expr`: a number, {m}, or {op, a, b?}) on the metric
 *  values `v`; null where it has no value (a division by zero), as in the text view. */
function derive(e, v) {
  if (typeof e === 'number') return e;
  if (e.m !== undefined) return v[e.m];
  const a = derive(e.a, v);
  if (a === null) return null;
  if (e.op === 'neg') return -a;
  const b = derive(e.b, v);
  if (b === null) return null;
  const ops = { '+': () => a + b, '-': () => a - b, '*': () => a * b, '/': () => (b === 0 ? null : a / b) };
  const r = ops[e.op]();
  return r !== null && Number.isFinite(r) ? r : null;
}

/** A derived value as the text view writes it: four decimals, or four significant digits in
 *  scientific notation outside [0.001, 1e6). */
function derivedNumber(v) {
  const a = Math.abs(v);
  if (a !== 0 && (a < 1e-3 || a >= 1e6)) return v.toExponential(3).replace('e+', 'e');
  return fixed(v, 4);
}

function td(text, cls) {
  const e = document.createElement('td');
  e.className = cls;
  e.textContent = text;
  return e;
}

/** The label with the search's matches marked. */
function labelSpan(text) {
  const span = document.createElement('span');
  span.className = 'label';
  const at = state.search ? text.toLowerCase().indexOf(state.search) : -1;
  if (at < 0) {
    span.textContent = text;
    return span;
  }
  const mark = document.createElement('mark');
  mark.textContent = text.slice(at, at + state.search.length);
  span.append(text.slice(0, at), mark, text.slice(at + state.search.length));
  return span;
}

function scopeRow(id, depth) {
  const n = nodesOf()[id];
  const vs = viewState();
  const tr = document.createElement('tr');
  tr.className = 'row k-' + n.k + (id === vs.selected ? ' selected' : '') +
    (state.matches.has(id) ? ' match' : '');
  tr.dataset.id = id;
  tr.dataset.depth = depth;
  cells(tr, n.i.map((_, m) => value(n, m, false)), n.e.map((_, m) => value(n, m, true)));
  const name = td('', 'name');
  name.style.paddingLeft = 6 + 14 * Math.min(depth, 100) + 'px';
  const toggle = document.createElement('span');
  toggle.className = 'toggle';
  toggle.textContent = n.c.length ? (vs.expanded.has(id) ? '▾' : '▸') : '';
  name.append(toggle, labelSpan(n.n));
  if (n.s) {
    const site = document.createElement('span');
    site.className = 'site';
    site.textContent = '(' + n.s + ')';
    name.append(site);
  }
  if (n.full) name.title = n.full;
  tr.append(name);
  return tr;
}

function moreRow(ids, depth) {
  const nodes = nodesOf();
  const sum = (excl) => [...Array(M).keys()].map((m) =>
    ids.reduce((s, c) => s + value(nodes[c], m, excl), 0));
  const tr = document.createElement('tr');
  tr.className = 'more';
  cells(tr, sum(false), sum(true));
  const name = td('(' + ids.length + ' more)', 'name');
  name.style.paddingLeft = 20 + 14 * Math.min(depth, 100) + 'px';
  tr.append(name);
  return tr;
}

function renderHeader() {
  const head = document.createElement('tr');
  for (let m = 0; m < M; m++) {
    for (const excl of [false, true]) {
      const th = document.createElement('th');
      th.colSpan = 2;
      th.dataset.m = m;
      th.dataset.excl = excl;
      th.textContent = D.metrics[m].name + (excl ? ' (E)' : ' (I)');
      if (state.sort.m === m && state.sort.excl === excl) th.className = 'sorted';
      th.onclick = () => { state.sort = { m, excl }; render(); };
      head.append(th);
    }
  }
  for (const d of DERIVED) {
    for (const excl of [false, true]) {
      const th = document.createElement('th');
      th.className = 'derived';
      th.title = d.name + ' = ' + d.formula;
      th.textContent = d.name + (excl ? ' (E)' : ' (I)');
      head.append(th);
    }
  }
  const name = document.createElement('th');
  name.className = 'name';
  name.textContent = 'scope';
  head.append(name);
  $('tree').tHead.replaceChildren(head);
}

function renderTable() {
  const body = document.createDocumentFragment();
  for (const r of visibleRows()) body.append(r.more ? moreRow(r.more, r.depth) : scopeRow(r.id, r.depth));
  $('tree').tBodies[0].replaceChildren(body);
}

/** The flame graph (icicle, root on top) of the zoomed scope, frames wider than 1 pixel. */
function renderFlame() {
  const box = $('flame');
  const nodes = nodesOf();
  const vs = viewState();
  const width = box.clientWidth || 800;
  const rows = Math.floor((box.clientHeight || 180) / 18);
  const base = costOf(nodes[vs.zoom]);
  const frames = document.createDocumentFragment();
  const stack = [{ id: vs.zoom, x: 0, depth: 0 }];
  while (stack.length && base > 0) {
    const { id, x, depth } = stack.pop();
    const n = nodes[id];
    const w = (costOf(n) / base) * width;
    if (w < 1 || depth >= rows) continue;
    const f = document.createElement('div');
    f.className = 'frame k-' + n.k + (id === vs.selected ? ' selected' : '');
    f.dataset.id = id;
    f.style.cssText = `left:${x}px;width:${w}px;top:${depth * 18}px;background:var(--${n.k},#ccc)`;
    f.textContent = n.n;
    f.title = (n.full || n.n) + ' ' + percent(costOf(n), total(state.sort.m));
    frames.append(f);
    let at = x;
    for (const c of children(id)) {
      stack.push({ id: c, x: at, depth: depth + 1 });
      at += (costOf(nodes[c]) / base) * width;
    }
  }
  box.replaceChildren(frames);
}

/** The selected scope's file with per-line costs (as --source), scrolled to its line. */
function renderSource() {
  const n = nodesOf()[viewState().selected];
  const box = $('source');
  if (n.f === undefined) {
    $('source-file').textContent = 'no source location for ' + n.n;
    box.replaceChildren();
    return;
  }
  const file = D.files[n.f];
  const m = state.sort.m;
  $('source-file').textContent = file.path + (file.skipped ? ' (source not embedded: ' + file.skipped + ')' : '');
  const lines = file.text !== undefined ? file.text.split('\n') : [];
  const numbers = lines.length ? lines.map((_, i) => i + 1) : Object.keys(file.lines).map(Number);
  const out = document.createDocumentFragment();
  for (const num of numbers) {
    const div = document.createElement('div');
    div.className = 'line' + (num === n.l ? ' current' : '');
    div.dataset.line = num;
    const cost = file.lines[num];
    const c = document.createElement('span');
    c.className = 'cost';
    c.textContent = cost ? percent(cost[m], D.metrics[m].total) : '';
    const e = document.createElement('span');
    e.className = 'num';
    e.textContent = num;
    div.append(c, e, lines.length ? lines[num - 1] : '');
    out.append(div);
  }
  box.replaceChildren(out);
  const current = box.querySelector('.line.current');
  if (current) current.scrollIntoView({ block: 'center' });
}

/** Per-thread inclusive cost of the selected scope, where there are several threads. */
function renderThreads() {
  const box = $('threads-box');
  if (D.threads.length < 2) { box.style.display = 'none'; return; }
  const n = nodesOf()[viewState().selected];
  const m = state.sort.m;
  const per = D.threads.map((_, t) => {
    const row = (n.th || []).find((r) => r[0] === t);
    return row ? row[1 + m] : 0;
  });
  const max = Math.max(1, ...per);
  $('threads-title').textContent = D.metrics[m].name + ' by thread: ' + n.n;
  $('threads-chart').replaceChildren(...per.map((v, t) => {
    const row = document.createElement('div');
    row.className = 'bar-row';
    row.dataset.thread = t;
    const who = document.createElement('span');
    who.className = 'who';
    who.textContent = D.threads[t];
    const bar = document.createElement('span');
    bar.className = 'bar';
    bar.style.width = (200 * v) / max + 'px';
    const num = document.createElement('span');
    num.className = 'value';
    num.textContent = absolute(v, D.metrics[m].unit);
    row.append(who, bar, num);
    return row;
  }));
}

/** Mark the tab shown: a pane's, or the current view's. */
function markTabs() {
  document.querySelectorAll('.tab').forEach((b) => b.classList.toggle('active', b.dataset.pane
    ? state.pane === b.dataset.pane
    : state.pane === null && Number(b.dataset.view) === state.view));
}

/** Show pane `name` ('objects', 'timeline', 'memmap' or 'asm') in place of the views, or the views
 *  (null). */
function showPane(name) {
  state.pane = name;
  $('controls').hidden = name !== null;
  document.querySelector('main').hidden = name !== null;
  document.querySelectorAll('.pane').forEach((p) => { p.hidden = p.id !== name + '-pane'; });
  if (name === 'objects') renderObjects();
  if (name === 'asm') renderAsm();
  const picture = name === 'timeline' || name === 'memmap' ? $(name + '-pane') : null;
  if (picture && !picture.firstChild) picture.innerHTML = D[name];
  markTabs();
}

/** The data objects' table, by the data samples of metric `state.objectSort` (click a metric's
 *  heading to sort by it). */
function renderObjects() {
  const m = state.objectSort;
  const table = $('objects');
  const cell = (tag, text, cls) => {
    const c = document.createElement(tag);
    c.textContent = text;
    if (cls) c.className = cls;
    return c;
  };
  const head = document.createElement('tr');
  head.append(cell('th', 'object', 'name'), cell('th', 'kind', 'name'), cell('th', 'size'), cell('th', 'blocks'));
  D.metrics.forEach((metric, i) => {
    const th = cell('th', metric.name + ' samples', i === m ? 'sorted' : '');
    th.dataset.m = i;
    head.append(th, cell('th', '%'));
  });
  table.tHead.replaceChildren(head);
  const rows = D.objects.slice().sort((a, b) => b.s[m] - a.s[m]);
  table.tBodies[0].replaceChildren(...rows.map((o) => {
    const tr = document.createElement('tr');
    tr.append(cell('td', o.n, 'name'), cell('td', o.k, 'name'), cell('td', o.size || ''),
      cell('td', o.b ? String(o.b) : ''));
    o.s.forEach((s, i) => tr.append(cell('td', String(s)), cell('td', fixed(o.p[i], 1) + '%')));
    return tr;
  }));
}

function render() {
  markTabs();
  renderHeader();
  renderTable();
  renderFlame();
  renderSource();
  renderThreads();
}

/** Select `id`, expanding its ancestors so that its row is shown, and scroll to it. */
function select(id) {
  const vs = viewState();
  for (let p = vs.parent[id]; p >= 0; p = vs.parent[p]) vs.expanded.add(p);
  vs.selected = id;
  render();
  const row = document.querySelector(`tr.row[data-id="${id}"]`);
  if (row) row.scrollIntoView({ block: 'nearest' });
}

/** Expand the hot path: the costliest child while it holds half its parent; select its end. */
function expandHot() {
  const nodes = nodesOf();
  let id = 0;
  for (;;) {
    viewState().expanded.add(id);
    const best = children(id).reduce((b, c) => (b < 0 || costOf(nodes[c]) > costOf(nodes[b]) ? c : b), -1);
    if (best < 0 || costOf(nodes[best]) * 2 < costOf(nodes[id]) || costOf(nodes[id]) === 0) break;
    id = best;
  }
  select(id);
}

/** Keyboard moves in the table: up/down between rows, right expands (or goes to the first
 *  child), left collapses (or goes to the parent), Enter toggles. */
function onKey(ev) {
  const vs = viewState();
  const ids = [...document.querySelectorAll('#tree tr.row')].map((r) => Number(r.dataset.id));
  const at = ids.indexOf(vs.selected);
  const open = vs.expanded.has(vs.selected) && nodesOf()[vs.selected].c.length > 0;
  const moves = {
    ArrowDown: () => select(ids[Math.min(at + 1, ids.length - 1)]),
    ArrowUp: () => select(ids[Math.max(at - 1, 0)]),
    ArrowRight: () => (open ? select(ids[at + 1]) : (vs.expanded.add(vs.selected), render())),
    ArrowLeft: () => (open ? (vs.expanded.delete(vs.selected), render()) : select(Math.max(vs.parent[vs.selected], 0))),
    Enter: () => (open ? vs.expanded.delete(vs.selected) : vs.expanded.add(vs.selected), render()),
  };
  if (!moves[ev.key] || at < 0) return;
  ev.preventDefault();
  moves[ev.key]();
}

function search(text) {
  state.search = text.trim().toLowerCase();
  state.matches = new Set();
  state.reveal = new Set();
  if (state.search) {
    nodesOf().forEach((n, id) => {
      if ((n.full || n.n).toLowerCase().includes(state.search)) state.matches.add(id);
    });
  }
  const vs = viewState();
  let shown = 0;
  for (const id of state.matches) {
    if (shown++ >= 500) break;
    state.reveal.add(id);
    for (let p = vs.parent[id]; p >= 0; p = vs.parent[p]) {
      vs.expanded.add(p);
      state.reveal.add(p);
    }
  }
  $('search-count').textContent = state.search ? state.matches.size + ' matches' : '';
  render();
}

function setup() {
  const size = (document.documentElement.outerHTML.length / 1048576).toFixed(1);
  $('title').textContent = D.command || 'hpcview-rs report';
  $('summary').textContent = D.metrics.map((m) => m.name + ': ' + absolute(m.total, m.unit) +
    ' (' + m.samples + ' samples)').join(', ') + ' · ' + D.threads.length + ' thread(s) · ' +
    D.scopes.reduce((a, b) => a + b, 0) + ' scopes · ' +
    D.files.filter((f) => f.text !== undefined).length + '/' + D.files.length +
    ' source files embedded · ' + size + ' MiB';
  document.querySelectorAll('.tab[data-view]').forEach((b) => {
    b.onclick = () => { showPane(null); showView(Number(b.dataset.view)); search($('search').value); };
  });
  document.querySelectorAll('.tab[data-pane]').forEach((b) => {
    b.hidden = !D[b.dataset.pane];
    b.onclick = () => showPane(b.dataset.pane);
  });
  $('objects').tHead.onclick = (ev) => {
    const th = ev.target.closest('th[data-m]');
    if (th) { state.objectSort = Number(th.dataset.m); renderObjects(); }
  };
  $('tree').tBodies[0].onclick = (ev) => {
    const tr = ev.target.closest('tr.row');
    if (!tr) return;
    const id = Number(tr.dataset.id);
    const vs = viewState();
    if (ev.target.classList.contains('toggle') || id === vs.selected) {
      if (vs.expanded.has(id)) vs.expanded.delete(id); else vs.expanded.add(id);
    }
    vs.selected = id;
    render();
  };
  $('flame').onclick = (ev) => {
    const f = ev.target.closest('.frame');
    if (!f) return;
    const id = Number(f.dataset.id);
    const vs = viewState();
    vs.zoom = id === vs.zoom && vs.parent[id] >= 0 ? vs.parent[id] : id;
    select(id);
  };
  $('table-box').onkeydown = onKey;
  $('search').oninput = (ev) => search(ev.target.value);
  $('hot').onclick = expandHot;
  $('collapse').onclick = () => { viewState().expanded = new Set([0]); viewState().zoom = 0; select(0); };
  $('threshold').oninput = (ev) => {
    state.threshold = Number(ev.target.value);
    $('threshold-value').textContent = state.threshold + '%';
    render();
  };
  const choice = $('thread');
  if (D.threads.length < 2) $('thread-choice').style.display = 'none';
  choice.append(new Option('all threads', -1), ...D.threads.map((t, i) => new Option(t, i)));
  choice.onchange = () => { state.thread = Number(choice.value); render(); };
  showView(0);
  document.body.dataset.ready = 'true';
}

setup();
