// Dashboard: the project's status and run counts, readiness, the next occurrences due, recent
// failures, and the scheduler's lag from /metrics. Refreshes every 5 s.

import {get, publicText} from '../lib/api.js';
import {h, replace} from '../lib/dom.js';
import {durationText, shortId, timeEl} from '../lib/format.js';
import {numberText, t} from '../lib/i18n.js';
import {taskNames} from '../lib/lookup.js';
import {badge, errorBox, facts, link, pageHeader, section, table} from '../lib/ui.js';

export const nav = {
  label: t('Dashboard'),
  path: '/'
};
export const routes = [{pattern: '/', render}];

const FAILED = ['failed', 'timed_out', 'lost'];

// Returns {count, sum, buckets: [[le, cumulative]]} summed over every series of histogram
// `name` in a Prometheus text exposition, or null when absent.
export function histogram(text, name) {
  let count = 0;
  let sum = 0;
  const buckets = new Map();
  let seen = false;
  for (const line of text.split('\n')) {
    if (line.startsWith('#') || !line.startsWith(name)) continue;
    const m = /^(\w+)(\{[^}]*\})?\s+(\S+)/.exec(line);
    if (!m) continue;
    const value = Number(m[3]);
    if (m[1] === `${name}_count`) {
      count += value;
      seen = true;
    } else if (m[1] === `${name}_sum`)
      sum += value;
    else if (m[1] === `${name}_bucket`) {
      const le = /le="([^"]+)"/.exec(m[2] || '');
      if (le) buckets.set(le[1], (buckets.get(le[1]) || 0) + value);
    }
  }
  if (!seen) return null;
  const sorted = [...buckets.entries()]
                     .map(([le, c]) => [le === '+Inf' ? Infinity : Number(le), c])
                     .sort((a, b) => a[0] - b[0]);
  return {count, sum, buckets: sorted};
}

// Returns the upper bound of the bucket holding quantile `q`, in seconds.
export function quantileBound(hist, q) {
  const target = hist.count * q;
  for (const [le, c] of hist.buckets)
    if (c >= target) return le;
  return Infinity;
}

function lagView(text) {
  const hist = histogram(text, 'ql_scheduler_lag_seconds');
  if (!hist || hist.count === 0) {
    return h('p', {class: 'muted', text: t('No occurrence admitted since this server started.')});
  }
  const bound = (q) => {
    const b = quantileBound(hist, q);
    return b === Infinity ? t('over 60 s') : `≤ ${durationText(b * 1000)}`;
  };
  return facts([
    [t('Occurrences admitted'), numberText(hist.count)],
    [t('Mean lag'), durationText((hist.sum / hist.count) * 1000)],
    [t('Median'), bound(0.5)],
    [t('99th percentile'), bound(0.99)],
  ]);
}

async function render(ctx) {
  ctx.title(t('Dashboard'));
  const errors = errorBox();
  const loading = () => h('p', {class: 'muted loading', text: t('Loading…')});
  const statusBox = h('div', {class: 'tiles', id: 'status-tiles'}, loading());
  const readyBox = h('div', {id: 'readiness'});
  const dueTable = table(
      [
        {label: t('Next fire'), cell: (row) => timeEl(row.next_fire_at, row.timezone)},
        {label: t('Task'), cell: (row) => link(row.taskName, `/tasks/${row.task_id}`)},
        {
          label: t('Schedule'),
          class: 'wide',
          cell: (row) => link(`${row.expression}`, `/triggers/${row.id}`, {}, {class: 'mono'})
        },
      ],
      null,
      t('No active trigger.'),
  );
  const failTable = table(
      [
        {label: t('Run'), cell: (r) => link(shortId(r.id), `/runs/${r.id}`, {}, {class: 'mono'})},
        {label: t('Task'), cell: (r) => link(r.taskName, `/tasks/${r.task_id}`)},
        {label: t('Status'), cell: (r) => badge(r.status)},
        {label: t('Finished'), class: 'wide', cell: (r) => timeEl(r.finished_at || r.created_at)},
        {
          label: t('Error'),
          class: 'wide',
          cell: (r) => r.error_summary ||
              (r.exit_code !== null ? t('exit {code}', {code: r.exit_code}) : '—')
        },
      ],
      null,
      t('No failed run.'),
  );
  const lagBox = h('div', {id: 'lag'}, loading());
  replace(
      ctx.main,
      pageHeader(t('Dashboard')),
      errors,
      h(
          'div',
          {class: 'grid'},
          section(t('Status'), statusBox, readyBox),
          section(
              t('Schedule lag'), h('p', {
                class: 'muted small',
                text: t(
                    'How late the scheduler admitted cron occurrences, since this server started (all projects).')
              }),
              lagBox),
          section(t('Next occurrences due'), dueTable),
          section(t('Recent failures'), failTable, link(t('All runs'), '/runs')),
          ),
  );

  const refresh = async () => {
    try {
      const [status, ready, metrics, triggers, ...failed] = await Promise.all([
        get('/api/v1/status', {}, ctx.signal),
        publicText('/readyz', ctx.signal),
        publicText('/metrics', ctx.signal),
        get('/api/v1/triggers', {limit: 500}, ctx.signal),
        ...FAILED.map((s) => get('/api/v1/runs', {status: s, limit: 10}, ctx.signal)),
      ]);
      errors.clear();
      const counts = status.runs_by_status || {};
      replace(
          statusBox,
          [
            [t('Runs'), status.runs_total],
            [t('Running'), (counts.running || 0) + (counts.dispatching || 0)],
            [t('Queued'), (counts.queued || 0) + (counts.created || 0) + (counts.retry_wait || 0)],
            [t('Succeeded'), counts.succeeded || 0],
            [t('Failed'), (counts.failed || 0) + (counts.timed_out || 0) + (counts.lost || 0)],
            [t('Enabled triggers'), status.enabled_triggers],
            counts.recovery_required ? [t('Need resolution'), counts.recovery_required] : null,
          ].filter(Boolean)
              .map(
                  ([label, value]) =>
                      h('div', {class: 'tile'},
                        h('span', {class: 'tile-value', text: numberText(value ?? 0)}),
                        h('span', {class: 'tile-label', text: label}))),
      );
      let readyText = 'ready';
      if (ready.status !== 200) {
        try {
          const body = JSON.parse(ready.text);
          readyText = `${body.code}: ${body.message}`;
        } catch {
          readyText = `HTTP ${ready.status}`;
        }
      }
      replace(
          readyBox,
          facts([
            [t('Project'), `${status.project.slug} (${t(status.project.status)})`],
            [
              t('Readiness'),
              h('span', {}, badge(ready.status === 200 ? 'ready' : 'not ready'),
                ready.status === 200 ? '' : ` ${readyText}`)
            ],
            [t('Executor'), status.executor_type],
            [t('Server time'), timeEl(status.now)],
          ]),
      );
      const due =
          (triggers.items || []).filter((row) => row.state === 'active' && row.next_fire_at);
      due.sort((a, b) => a.next_fire_at.localeCompare(b.next_fire_at));
      const recent = failed.flatMap((p) => p.items || [])
                         .sort((a, b) => b.created_at.localeCompare(a.created_at))
                         .slice(0, 10);
      const names =
          await taskNames([...due.slice(0, 10), ...recent].map((x) => x.task_id), ctx.signal);
      dueTable.setRows(due.slice(0, 10).map((row) => ({...row, taskName: names.get(row.task_id)})));
      failTable.setRows(recent.map((r) => ({...r, taskName: names.get(r.task_id)})));
      replace(lagBox, lagView(metrics.text));
    } catch (err) {
      if (err.name !== 'AbortError') {
        errors.show(err);
        dueTable.setFailed();
        failTable.setFailed();
      }
    }
  };
  await refresh();
  ctx.every(5000, refresh);
}
