// Runs as bars: height is how long a run took, colour how it ended, each a link to its run
// (Airflow's grid). Drawn by the History page (per task) and a task's own page.

import {durationText, timeText} from './format.js';
import {t} from './i18n.js';
import {href} from './ui.js';

const SVG = 'http://www.w3.org/2000/svg';

// The colour class of a run status (panel.css: .bar-ok, .bar-bad, ...).
export function barClass(status) {
  if (status === 'succeeded') return 'bar-ok';
  if (['failed', 'timed_out', 'lost', 'recovery_required'].includes(status)) return 'bar-bad';
  if (['running', 'dispatching'].includes(status)) return 'bar-run';
  if (['cancelled', 'skipped'].includes(status)) return 'bar-muted';
  return 'bar-wait';
}

// How long `run` ran (until `now` while it runs), in milliseconds.
export function durationOf(run, now) {
  if (!run.started_at) return 0;
  const end = run.finished_at ? Date.parse(run.finished_at) : now;
  return Math.max(0, end - Date.parse(run.started_at));
}

// `runs` (oldest first) as an SVG of `slots` bars, right-aligned.
export function runBars(runs, now, slots) {
  const width = slots * 10;
  const svg = document.createElementNS(SVG, 'svg');
  svg.setAttribute('viewBox', `0 0 ${width} 40`);
  svg.setAttribute('class', 'history-bars');
  svg.setAttribute('role', 'img');
  svg.setAttribute('aria-label', t('{n} runs', {n: runs.length}));
  const longest = Math.max(1, ...runs.map((r) => durationOf(r, now)));
  runs.forEach((run, i) => {
    const d = durationOf(run, now);
    const height = Math.max(4, Math.round((d / longest) * 38));
    const a = document.createElementNS(SVG, 'a');
    a.setAttribute('href', href(`/runs/${run.id}`));
    a.setAttribute('class', 'history-run');
    const rect = document.createElementNS(SVG, 'rect');
    rect.setAttribute('x', String(width - (runs.length - i) * 10 + 1));
    rect.setAttribute('y', String(40 - height));
    rect.setAttribute('width', '8');
    rect.setAttribute('height', String(height));
    rect.setAttribute('class', barClass(run.status));
    rect.dataset.status = run.status;
    const title = document.createElementNS(SVG, 'title');
    title.textContent = `${t(run.status)} · ${timeText(run.created_at)} · ${durationText(d)}`;
    rect.append(title);
    a.append(rect);
    svg.append(a);
  });
  return svg;
}
