// hpcview-rs report, machine-code pane: the listings of the hottest procedures (D.asm, each as
// `hpcview-rs --asm PROCEDURE --json` writes it: {procedure, binary, metrics: [[name, unit]],
// run_totals, read_with, lines: [{scope: {depth, label}} | {instruction: {depth, address, text,
// line?, costs, kernel, jump?}}], own, inlined, kernel, loops}), one at a time: instructions
// grouped by loop and inlined code, each with its user- and kernel-mode share of the run per
// metric, the hottest marked, jumps named. Loaded after report.js, whose D, $ and fixed it uses.
'use strict';

/** How many of a listing's hottest instructions (by the first metric) are marked. */
const ASM_MARKED = 3;
const asmState = { at: 0 };

/** `v` as a share of `total`, as the text listing writes it ('' for nothing). */
function asmShare(v, total) {
  return v > 0 && total > 0 ? fixed((100 * v) / total, 1) + '%' : '';
}

function asmCell(tag, text, cls) {
  const c = document.createElement(tag);
  c.textContent = text;
  if (cls) c.className = cls;
  return c;
}

/** Draw the listing chosen (the first, the costliest, at first). */
function renderAsm() {
  const choice = $('asm-procedure');
  if (!choice.options.length) {
    choice.append(...D.asm.map((v, i) => new Option(v.procedure, i)));
    choice.onchange = () => { asmState.at = Number(choice.value); renderAsm(); };
  }
  const v = D.asm[asmState.at];
  const parts = v.metrics.map(([name, unit], m) => name + ': own code ' + asmShare(v.own[m], v.run_totals[m])
    + ', inlined ' + asmShare(v.inlined[m], v.run_totals[m]) + ', kernel below it '
    + asmShare(v.kernel[m], v.run_totals[m]) + (v.read_with[m] ? ' (read with each ' + v.read_with[m] + ' sample)' : ''));
  $('asm-summary').textContent = v.procedure + ' (' + v.binary + '; ' + v.loops + ' loops) ' + parts.join('; ');
  const head = document.createElement('tr');
  head.append(asmCell('th', ''));
  for (const [name] of v.metrics) head.append(asmCell('th', name + ' user'), asmCell('th', 'kern'));
  head.append(asmCell('th', 'address'), asmCell('th', 'instruction', 'name'), asmCell('th', 'jump', 'name'),
    asmCell('th', 'line', 'name'));
  $('asm').tHead.replaceChildren(head);
  const instructions = v.lines.filter((l) => l.instruction).map((l) => l.instruction);
  const hottest = new Set(instructions.filter((i) => i.costs[0] > 0)
    .sort((a, b) => b.costs[0] - a.costs[0]).slice(0, ASM_MARKED).map((i) => i.address));
  $('asm').tBodies[0].replaceChildren(...v.lines.map((l) => {
    const tr = document.createElement('tr');
    if (l.scope) {
      tr.className = 'asm-scope';
      const label = asmCell('td', l.scope.label, 'name');
      label.colSpan = 5 + 2 * v.metrics.length;
      label.style.paddingLeft = 6 + 16 * l.scope.depth + 'px';
      tr.append(label);
      return tr;
    }
    const i = l.instruction;
    tr.dataset.address = i.address;
    if (hottest.has(i.address)) tr.className = 'asm-hot';
    tr.append(asmCell('td', hottest.has(i.address) ? '>>' : ''));
    v.metrics.forEach((_, m) => tr.append(asmCell('td', asmShare(i.costs[m], v.run_totals[m]), 'user'),
      asmCell('td', asmShare(i.kernel[m], v.run_totals[m]), 'kernel')));
    const text = asmCell('td', i.text, 'name');
    text.style.paddingLeft = 6 + 16 * i.depth + 'px';
    tr.append(asmCell('td', '0x' + i.address.toString(16)), text, asmCell('td', i.jump || '', 'name'),
      asmCell('td', i.line || '', 'name'));
    return tr;
  }));
}
