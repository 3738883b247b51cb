// History at a glance: the recent runs of each task as bars (height: how long it ran, colour:
// how it ended; Airflow's grid of runs by task, with durations), and what fires in the next 24
// hours. Read from the newest 500 runs and the tasks' schedules.

import {get} from '../lib/api.js';
import {h, replace} from '../lib/dom.js';
import {durationText, timeEl, timeText} from '../lib/format.js';
import {t} from '../lib/i18n.js';
import {errorBox, href, link, pageHeader, section, table} from '../lib/ui.js';

export const nav = {label: t('History'), path: '/history'};
export const routes = [{pattern: '/history', render}];

const SVG = 'http://www.w3.org/2000/svg';
const RUNS_READ = 500;  // the newest runs the page is drawn from
const BARS = 30;        // runs per task, oldest on the left
const DAY_MS = 24 * 3600 * 1000;
const TRIGGERS_PREVIEWED = 40;

// The colour class of a run status (panel.css: .bar-ok, .bar-bad, ...).
function barClass(status) {
  if (status === 'succeeded') return 'bar-ok';
  if (['failed', 'timed_out', 'lost', 'recovery_required'].includes(status)) return 'bar-bad';
  if (['running', 'dispatching'].includes(status)) return 'bar-run';
  if (['cancelled', 'skipped'].includes(status)) return 'bar-muted';
  return 'bar-wait';
}

function durationOf(run, now) {
  if (!run.started_at) return 0;
  const end = run.finished_at ? Date.parse(run.finished_at) : now;
  return Math.max(0, end - Date.parse(run.started_at));
}

// One task's runs as an SVG of bars, each a link to its run with a title saying what it was.
function bars(runs, now) {
  const width = BARS * 10;
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

async function render(ctx) {
  ctx.title(t('History'));
  const errors = errorBox();
  const grid = h('div', {id: 'history-grid'}, h('p', {class: 'muted', text: t('Loading…')}));
  const upcoming = h('div', {id: 'history-next'}, h('p', {class: 'muted', text: t('Loading…')}));
  replace(ctx.main, pageHeader(t('History')), errors,
          section(t('Recent runs by task'), h('p', {
                    class: 'muted small',
                    text: t('Each bar is a run, oldest on the left: its height is how long it ran, its colour how it ended.'),
                  }),
                  grid),
          section(t('Next 24 hours'), upcoming));

  const now = Date.now();
  let runs = [];
  let tasks = [];
  try {
    [runs, tasks] = await Promise.all([
      get('/api/v1/runs', {limit: RUNS_READ}, ctx.signal).then((r) => r.items || []),
      get('/api/v1/tasks', {limit: 500}, ctx.signal).then((r) => r.items || []),
    ]);
  } catch (err) {
    if (err.name === 'AbortError') return;
    errors.show(err);
    replace(grid, h('p', {class: 'muted', text: t('Could not load.')}));
    replace(upcoming, h('p', {class: 'muted', text: t('Could not load.')}));
    return;
  }

  // Runs by task, newest BARS of each, oldest first.
  const byTask = new Map();
  for (const run of runs) {
    if (!byTask.has(run.task_id)) byTask.set(run.task_id, {name: run.task_name || run.task_id, runs: []});
    const entry = byTask.get(run.task_id);
    if (entry.runs.length < BARS) entry.runs.push(run);
  }
  const rows = [...byTask.entries()].sort((a, b) => a[1].name.localeCompare(b[1].name));
  replace(grid, rows.length ?
              table(
                  [
                    {label: t('Task'), cell: ([id, e]) => link(e.name, `/tasks/${id}`)},
                    {label: t('Runs'), cell: ([, e]) => bars([...e.runs].reverse(), now)},
                    {
                      label: t('Last run'),
                      class: 'wide',
                      cell: ([, e]) => h('span', {}, t(e.runs[0].status), ' · ',
                                         timeEl(e.runs[0].created_at)),
                    },
                  ],
                  rows) :
              h('p', {class: 'muted', text: t('No run yet.')}));

  // What fires in the next 24 hours: the active triggers' next fire times.
  const active = [];
  for (const task of tasks) {
    for (const s of task.schedules || []) {
      if (s.state === 'active') active.push({task, schedule: s});
    }
  }
  const fires = [];
  try {
    const previews = await Promise.all(active.slice(0, TRIGGERS_PREVIEWED).map(
        ({schedule}) => get(`/api/v1/triggers/${schedule.trigger_id}/next`, {count: 100}, ctx.signal)));
    previews.forEach((p, i) => {
      for (const f of p.fire_times || []) {
        const at = Date.parse(f.at);
        if (at - now <= DAY_MS) fires.push({at: f.at, ...active[i]});
      }
    });
  } catch (err) {
    if (err.name === 'AbortError') return;
    errors.show(err);
  }
  fires.sort((a, b) => Date.parse(a.at) - Date.parse(b.at));
  replace(upcoming,
          fires.length ?
              table(
                  [
                    {label: t('When'), cell: (f) => timeEl(f.at, f.schedule.timezone)},
                    {label: t('Task'), cell: (f) => link(f.task.name, `/tasks/${f.task.id}`)},
                    {label: t('Trigger'), class: 'wide', cell: (f) => f.schedule.trigger_name},
                  ],
                  fires.slice(0, 200)) :
              h('p', {class: 'muted', text: t('Nothing fires in the next 24 hours.')}));
  if (active.length > TRIGGERS_PREVIEWED) {
    upcoming.append(h('p', {class: 'muted small',
                            text: t('Showing the first {n} active triggers.', {n: TRIGGERS_PREVIEWED})}));
  }
}
