// kiln board: polls /api/runs and draws every run's curves (overlaid, one colour per run), its
// confusion matrix, per-class scores, configuration and model summary. Plain JavaScript and SVG,
// no libraries, so the page works offline.
'use strict';

const COLORS = ['#1f77b4', '#d62728', '#2ca02c', '#ff7f0e', '#9467bd', '#8c564b', '#e377c2'];
const POLL_MS = 2000;
const SVG_NS = 'http://www.w3.org/2000/svg';

function escapeHtml(text) {
  return String(text).replace(/[&<>"']/g, (c) => ({
    '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;'
  })[c]);
}

// A number as the page prints it: 4 significant digits, exponent for very small or large values.
function fmt(v) {
  if (v === null || v === undefined || !Number.isFinite(v)) return '–';
  const a = Math.abs(v);
  if (a !== 0 && (a < 1e-3 || a >= 1e5)) return v.toExponential(2);
  return Number(v.toPrecision(4)).toString();
}

// An integer from the files, safe to put into HTML (anything else shows as –).
function int(v) {
  return Number.isInteger(v) ? String(v) : '–';
}

function percent(v) {
  return Number.isFinite(v) ? (100 * v).toFixed(2) + '%' : '–';
}

function last(values) {
  if (!values) return null;
  for (let i = values.length - 1; i >= 0; --i)
    if (values[i] !== null && Number.isFinite(values[i])) return values[i];
  return null;
}

// About five round tick values covering [lo, hi].
function ticks(lo, hi, log) {
  if (log) {
    const out = [];
    for (let e = Math.floor(Math.log10(lo)); e <= Math.ceil(Math.log10(hi)); ++e) out.push(10 ** e);
    return out.filter((t) => t >= lo * 0.999 && t <= hi * 1.001);
  }
  const span = hi - lo || Math.abs(hi) || 1;
  const raw = span / 5;
  const step = [1, 2, 2.5, 5, 10].map((m) => m * 10 ** Math.floor(Math.log10(raw)))
      .find((s) => s >= raw);
  const out = [];
  for (let t = Math.ceil(lo / step) * step; t <= hi + step * 1e-9; t += step) out.push(t);
  return out;
}

function el(name, attrs, parent) {
  const node = document.createElementNS(SVG_NS, name);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
  if (parent) parent.appendChild(node);
  return node;
}

// A line chart of `series` ([{label, color, dash, xs, ys}]); null values leave gaps.
function lineChart(title, xLabel, series, options) {
  const box = document.createElement('div');
  box.className = 'chart';
  box.dataset.title = title;
  const points = [];
  for (const s of series)
    s.xs.forEach((x, i) => {
      const y = s.ys[i];
      if (x !== null && y !== null && Number.isFinite(x) && Number.isFinite(y) &&
          (!options.log || y > 0)) points.push([x, y]);
    });
  if (points.length === 0) {
    box.innerHTML = `<h3>${escapeHtml(title)}</h3><div class="empty">no data yet</div>`;
    return box;
  }
  // The legend sits between the title and the plot, one row per ~3 entries.
  const shown = series.filter((s) => s.ys.some((y) => y !== null && Number.isFinite(y)));
  const legendRows = Math.ceil(shown.length / 2);
  const W = 560, L = 70, R = 14, T = 30 + 16 * legendRows, B = 42, H = T + 230 + B;
  let [x0, x1] = [Math.min(...points.map((p) => p[0])), Math.max(...points.map((p) => p[0]))];
  let [y0, y1] = [Math.min(...points.map((p) => p[1])), Math.max(...points.map((p) => p[1]))];
  const log = options.log && y1 / y0 > 50;
  if (x0 === x1) { x0 -= 1; x1 += 1; }
  if (y0 === y1) { const d = Math.abs(y0) * 0.1 || 1; y0 -= log ? y0 / 2 : d; y1 += log ? y1 : d; }
  const fy = log ? (y) => Math.log10(y) : (y) => y;
  const px = (x) => L + (x - x0) / (x1 - x0) * (W - L - R);
  const py = (y) => T + (1 - (fy(y) - fy(y0)) / (fy(y1) - fy(y0))) * (H - T - B);
  const svg = el('svg', {viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-label': title});
  el('text', {x: 8, y: 18, 'font-size': 15, 'font-weight': 'bold'}, svg).textContent = title;
  const axis = el('g', {class: 'axis'}, svg);
  const yTicks = ticks(y0, y1, log);
  // One notation per axis: exponents for all ticks when the values are small.
  const small = Math.max(...yTicks.map(Math.abs)) < 1e-2;
  for (const t of yTicks) {
    el('line', {x1: L, x2: W - R, y1: py(t), y2: py(t)}, axis);
    el('text', {x: L - 6, y: py(t) + 4, 'text-anchor': 'end'}, axis).textContent =
        small && t !== 0 ? t.toExponential(2) : fmt(t);
  }
  for (const t of ticks(x0, x1, false)) {
    el('line', {x1: px(t), x2: px(t), y1: H - B, y2: H - B + 4, stroke: '#999'}, axis);
    el('text', {x: px(t), y: H - B + 16, 'text-anchor': 'middle'}, axis).textContent = fmt(t);
  }
  el('text', {x: (L + W - R) / 2, y: H - 6, 'text-anchor': 'middle'}, axis).textContent = xLabel;
  el('rect', {x: L, y: T, width: W - L - R, height: H - T - B, fill: 'none', stroke: '#ccc'}, svg);
  const legend = el('g', {class: 'legend'}, svg);
  let entry = 0;
  for (const s of series) {
    const g = el('g', {class: 'series', 'data-label': s.label}, svg);
    let run = [];
    const flush = () => {
      if (run.length > 1)
        el('polyline', {points: run.join(' '), fill: 'none', stroke: s.color, 'stroke-width': 1.6,
                        'stroke-dasharray': s.dash ? '5 3' : 'none'}, g);
      else if (run.length === 1) {
        const [cx, cy] = run[0].split(',');
        el('circle', {cx, cy, r: 2.5, fill: s.color}, g);
      }
      run = [];
    };
    let n = 0;
    s.xs.forEach((x, i) => {
      const y = s.ys[i];
      if (x === null || y === null || !Number.isFinite(y) || (log && y <= 0)) return flush();
      run.push(`${px(x).toFixed(1)},${py(y).toFixed(1)}`);
      ++n;
    });
    flush();
    g.setAttribute('data-points', n);
    if (n === 0) continue;
    const text = `${s.label}: ${fmt(last(s.ys))}`;
    const lx = 8 + (entry % 2) * (W / 2), ly = 34 + 16 * Math.floor(entry / 2);
    el('line', {x1: lx, x2: lx + 16, y1: ly - 4, y2: ly - 4, stroke: s.color, 'stroke-width': 2.5,
                'stroke-dasharray': s.dash ? '5 3' : 'none'}, legend);
    el('text', {x: lx + 21, y: ly}, legend).textContent = text;
    ++entry;
  }
  box.appendChild(svg);
  return box;
}

function column(table, name) {
  return table && Array.isArray(table[name]) ? table[name] : null;
}

// The series of one chart over all runs: for each run, one series per (column, dash) pair.
function seriesOf(runs, tableName, xName, columns) {
  const out = [];
  runs.forEach((run, i) => {
    const table = run[tableName];
    const xs = column(table, xName);
    if (!xs) return;
    for (const [name, dash] of columns) {
      const ys = column(table, name);
      if (ys) out.push({label: `${run.name} ${name}`, color: COLORS[i % COLORS.length], dash, xs, ys});
    }
  });
  return out;
}

function renderCharts(runs) {
  const charts = document.getElementById('charts');
  charts.replaceChildren(
      lineChart('Loss per step', 'step', seriesOf(runs, 'steps', 'step', [['loss', false]]), {}),
      lineChart('Loss per epoch', 'epoch',
                seriesOf(runs, 'history', 'epoch', [['loss', false], ['val_loss', true]]), {}),
      lineChart('Accuracy per epoch', 'epoch',
                seriesOf(runs, 'history', 'epoch', [['accuracy', false], ['val_accuracy', true]]),
                {}),
      lineChart('Learning rate per step', 'step', seriesOf(runs, 'steps', 'step', [['lr', false]]),
                {log: true}),
      lineChart('Learning rate per epoch', 'epoch',
                seriesOf(runs, 'history', 'epoch', [['lr', false]]), {log: true}),
      lineChart('Training samples/s', 'step',
                seriesOf(runs, 'steps', 'step', [['samples_per_second', false]]), {}));
}

function runCard(run, i) {
  const h = run.history || {};
  const card = document.createElement('div');
  card.className = 'run-card';
  card.dataset.run = run.name;
  const epoch = run.epochs ? `epoch ${int(run.epoch)}/${int(run.epochs)}` : '';
  let lines = `<div><span class="swatch" style="background:${COLORS[i % COLORS.length]}"></span>` +
      `<b>${escapeHtml(run.name)}</b><span class="state ${escapeHtml(run.status)}">` +
      `${escapeHtml(run.status)}</span> ${epoch}</div>` +
      `<div class="metric">loss ${fmt(last(h.loss))} · val_loss ${fmt(last(h.val_loss))} · ` +
      `accuracy ${percent(last(h.accuracy))} · val_accuracy ${percent(last(h.val_accuracy))}</div>` +
      `<div class="metric">lr ${fmt(last(column(run.steps, 'lr')) ?? last(h.lr))} · ` +
      `${fmt(last(column(run.steps, 'samples_per_second')))} samples/s · ` +
      `${int(run.steps_total)} steps</div>`;
  if (run.report_source === 'test' && run.report)
    lines += `<div class="metric test-accuracy">test accuracy <b>${percent(run.report.accuracy)}` +
        `</b> (loss ${fmt(run.report.loss)}, ${int(run.report.samples)} samples)</div>`;
  card.innerHTML = lines;
  return card;
}

// The confusion matrix as a heat map: each cell shaded by its share of its row (true class).
function confusionTable(report) {
  const names = Array.isArray(report.class_names) ? report.class_names : [];
  const n = names.length;
  const counts = report.confusion || [];
  if (n === 0 || counts.length !== n * n) return '<p class="notes">no confusion matrix</p>';
  let html = '<table class="confusion"><tr><th>true \\ predicted</th>' +
      names.map((c) => `<th>${escapeHtml(c)}</th>`).join('') + '</tr>';
  for (let r = 0; r < n; ++r) {
    const row = counts.slice(r * n, r * n + n).map((v) => (Number.isInteger(v) ? v : 0));
    const total = row.reduce((a, b) => a + b, 0) || 1;
    html += `<tr><th>${escapeHtml(names[r])}</th>`;
    row.forEach((v, c) => {
      const share = v / total;
      const hue = r === c ? '34, 139, 34' : '200, 30, 30';
      const color = share > 0.55 ? '#fff' : '#222';
      html += `<td style="background: rgba(${hue}, ${Math.min(1, 0.1 + share).toFixed(2)});` +
          ` color: ${color}" title="${escapeHtml(names[r])} → ${escapeHtml(names[c])}">${v}</td>`;
    });
    html += '</tr>';
  }
  return html + '</table>';
}

function perClassTable(report) {
  const rows = Array.isArray(report.per_class) ? report.per_class : [];
  return '<table class="per-class"><tr><th>class</th><th>precision</th><th>recall</th><th>F1</th>' +
      '<th>support</th></tr>' + rows.map((r) => `<tr><td class="key">${escapeHtml(r.class)}</td>` +
      `<td>${fmt(r.precision)}</td><td>${fmt(r.recall)}</td><td>${fmt(r.f1)}</td>` +
      `<td>${int(r.support)}</td></tr>`).join('') + '</table>';
}

function configTable(settings) {
  const keys = Object.keys(settings || {});
  if (keys.length === 0) return '<p class="notes">no settings (see the notes above)</p>';
  return '<table class="config">' + keys.map((k) => `<tr><td class="key">${escapeHtml(k)}</td>` +
      `<td>${escapeHtml(typeof settings[k] === 'object' ? JSON.stringify(settings[k]) :
                        String(settings[k]))}</td></tr>`).join('') + '</table>';
}

function runDetails(run, i) {
  const box = document.createElement('div');
  box.className = 'details';
  box.dataset.run = run.name;
  const report = run.report;
  const source = run.report_source === 'test'
      ? escapeHtml(run.test_name || 'test split')
      : `${escapeHtml(report && report.split === 'test' ? 'test split' : 'validation')} after ` +
        `epoch ${report ? int(report.epoch) : '?'}`;
  let html = `<h2><span class="swatch" style="background:${COLORS[i % COLORS.length]}"></span>` +
      `${escapeHtml(run.name)} <small>${escapeHtml(run.path)}</small></h2>`;
  if (run.notes && run.notes.length)
    html += `<div class="notes">${run.notes.map(escapeHtml).join('<br>')}</div>`;
  html += '<div class="cols">';
  if (report)
    html += `<div><h3>Confusion matrix — ${source}, accuracy ${percent(report.accuracy)}</h3>` +
        `${confusionTable(report)}</div><div><h3>Per class</h3>${perClassTable(report)}</div>`;
  else
    html += '<div><h3>Confusion matrix</h3><p class="notes">after the first epoch</p></div>';
  html += `<div><h3>Configuration</h3>${configTable(run.settings)}</div></div>`;
  html += `<h3>Model</h3><pre class="summary">${escapeHtml(run.summary || 'summary.txt not yet written')}</pre>`;
  box.innerHTML = html;
  return box;
}

function render(runs) {
  document.getElementById('runs').replaceChildren(...runs.map(runCard));
  renderCharts(runs);
  document.getElementById('details').replaceChildren(...runs.map(runDetails));
}

let lastText = '';

async function refresh() {
  const status = document.getElementById('status');
  try {
    const response = await fetch('/api/runs', {cache: 'no-store'});
    if (!response.ok) throw new Error(`HTTP ${response.status}`);
    const text = await response.text();
    const runs = JSON.parse(text);
    // Unchanged data (a finished run) is not redrawn, so a selection on the page survives.
    if (text !== lastText) render(runs);
    lastText = text;
    status.className = '';
    status.textContent = `${runs.length} run(s) · updated ${new Date().toLocaleTimeString()}`;
    document.body.dataset.ready = 'true';
  } catch (e) {
    status.className = 'error';
    status.textContent = `cannot reach the board (${e.message}); retrying`;
  }
}

refresh();
setInterval(refresh, POLL_MS);
