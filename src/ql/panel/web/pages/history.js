// History at a glance: the recent runs of each task as bars (height: how long it ran, colour:
// how it ended; Airflow's grid of runs by task, with durations), and what fires in the next 24
// hours. Read from the newest 500 runs and the tasks' schedules.

import {get} from '../lib/api.js';
import {h, replace} from '../lib/dom.js';
import {timeEl, timeText} from '../lib/format.js';
import {t} from '../lib/i18n.js';
import {runBars} from '../lib/run_bars.js';
import {errorBox, link, pageHeader, section, table} from '../lib/ui.js';

export const nav = {label: t('History'), path: '/history'};
export const routes = [{pattern: '/history', render}];

const RUNS_READ = 500;  // the newest runs the page is drawn from
const BARS = 30;        // runs per task, oldest on the left
const DAY_MS = 24 * 3600 * 1000;
const TRIGGERS_PREVIEWED = 40;

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
                    {label: t('Runs'), cell: ([, e]) => runBars([...e.runs].reverse(), now, BARS)},
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
