// Runs: the list with filters (task, trigger, status from the API; a time window applied to
// the pages as they arrive, newest first), and one run with its attempts, events and log,
// followed live while it runs, why a skipped run was skipped and how a recovery_required run
// was resolved. Cancel and retry for operators; admins resolve a run in recovery_required.

import {followLog, get, pager, post, readLog} from '../lib/api.js';
import {h, replace} from '../lib/dom.js';
import {durationEl, isoFromLocalInput, localInputFromIso, shortId, timeEl} from '../lib/format.js';
import {t, tParts} from '../lib/i18n.js';
import {principalNames, taskNames} from '../lib/lookup.js';
import {actionButton, allowed, badge, errorBox, errorText, facts, field, inlineForm, link, notice, pagedTable, pageHeader, section, select, table} from '../lib/ui.js';

export const nav = {
  label: t('Runs'),
  path: '/runs'
};
export const routes = [
  {pattern: '/runs', render: renderList},
  {pattern: '/runs/:id', render: renderRun},
];

const STATUSES = [
  'created', 'queued', 'dispatching', 'running', 'succeeded', 'failed', 'cancelled', 'timed_out',
  'retry_wait', 'lost', 'recovery_required', 'skipped'
];
const TERMINAL = new Set(['succeeded', 'failed', 'cancelled', 'timed_out', 'skipped']);
// Why admission recorded a cron occurrence as skipped, by the run's error_code.
const SKIP_REASONS = {
  overlap:
      t('an earlier run of its trigger was unfinished and the trigger\'s overlap policy is forbid'),
  concurrency: t('the task already had as many unfinished runs as its concurrency limit allows'),
};

// Returns why a skipped run was skipped, in words.
export function skipReasonText(run) {
  const why = SKIP_REASONS[run.error_code];
  return why ? `${run.error_code}: ${why}` :
               `${run.error_code || t('unknown')}: ${run.error_summary || ''}`;
}

// Returns a run's status badge; a skipped run's reason (overlap, concurrency) follows it.
function statusCell(r) {
  if (r.status !== 'skipped') return badge(r.status);
  return h(
      'span', {class: 'status-skipped'}, badge(r.status),
      h('span', {class: 'muted small skip-reason', text: ` ${r.error_code || ''}`}));
}

// Returns the notice of a queued run that no worker may take yet (`waiting` of GET
// /api/v1/runs/{id}, ql-cluster): the pool and labels it asks for and what is missing, in the
// server's words.
function waitingNotice(waiting) {
  const labels = Object.entries(waiting.labels || {}).map(([k, v]) => `${k}=${v}`).join(', ');
  const params = {pool: waiting.pool || 'default', labels: labels || t('none')};
  const text = waiting.reason === 'waiting_for_worker' ?
      t('Waiting for a worker: pool {pool}, labels {labels}', params) :
      t('Waiting for a free slot: pool {pool}, labels {labels}', params);
  return h(
      'div', {
        class: 'banner warn',
        role: 'status',
        id: 'run-waiting',
        dataset: {reason: waiting.reason || ''}
      },
      h('strong', {text}), waiting.detail ? ` — ${waiting.detail}` : '');
}

// Text kept in the log view; older output is dropped from the top.
const LOG_KEEP_CHARS = 512 * 1024;
// How much of the end of a log the view reads first: a long log shows its end at once, and the
// whole of it is one download away.
const LOG_TAIL_BYTES = 256 * 1024;

// Returns a table of runs; `names` maps task ids to names.
export function runTable(rows, names = new Map()) {
  return table(
      [
        {
          label: t('Run'),
          cell: (r) =>
              link(shortId(r.id), `/runs/${r.id}`, {}, {class: 'mono run-link', title: r.id})
        },
        {
          label: t('Task'),
          cell: (r) => link(names.get(r.task_id) || shortId(r.task_id), `/tasks/${r.task_id}`)
        },
        {label: t('Status'), cell: statusCell},
        {label: t('Type'), class: 'wide', cell: (r) => t(r.trigger_type)},
        {label: t('Created'), cell: (r) => timeEl(r.created_at)},
        {
          label: t('Duration'),
          class: 'wide num',
          cell: (r) => durationEl(r.started_at, r.finished_at)
        },
        {
          label: t('Exit'),
          class: 'wide num',
          cell: (r) => (r.exit_code === null ? '—' : String(r.exit_code))
        },
      ],
      rows,
      t('No run.'),
  );
}

async function renderList(ctx) {
  ctx.title(t('Runs'));
  const q = ctx.query;
  const errors = errorBox();
  const tasks = (await get('/api/v1/tasks', {limit: 500}, ctx.signal)).items || [];
  const names = new Map(tasks.map((row) => [row.id, row.name]));
  const taskSel = select(
      [['', t('any task')], ...tasks.map((row) => [row.id, row.name])], q.task || '',
      {id: 'runs-task'});
  const statusSel = select(
      [['', t('any status')], ...STATUSES.map((s) => [s, t(s)])], q.status || '',
      {id: 'runs-status'});
  const since =
      h('input', {type: 'datetime-local', id: 'runs-since', value: localInputFromIso(q.since)});
  const until =
      h('input', {type: 'datetime-local', id: 'runs-until', value: localInputFromIso(q.until)});
  const live = h('input', {type: 'checkbox', id: 'runs-live', checked: q.live !== '0'});
  const form = h(
      'form',
      {class: 'filters', id: 'runs-filters'},
      field(t('Task'), taskSel),
      field(t('Status'), statusSel),
      field(t('Created after'), since),
      field(t('Created before'), until),
      h('div', {class: 'field check'}, live,
        h('label',
          { for: live.id, text: t('Refresh every 2 s')
          })),
      h('div', {class: 'field'}, h('button', {type: 'submit', class: 'btn', text: t('Apply')})),
  );
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    ctx.navigate('/runs', {
      task: taskSel.value,
      trigger: q.trigger || '',
      status: statusSel.value,
      since: isoFromLocalInput(since.value),
      until: isoFromLocalInput(until.value),
      live: live.checked ? '' : '0',
    });
  });
  const sinceIso = q.since || '';
  const untilIso = q.until || '';
  const inWindow = (r) =>
      (!sinceIso || r.created_at >= sinceIso) && (!untilIso || r.created_at < untilIso);
  const apiQuery = {task_id: q.task, trigger_id: q.trigger, status: q.status};
  const collect = async (items, signal) => {
    for (const [k, v] of await taskNames(
             items.map((r) => r.task_id).filter((id) => !names.has(id)), signal))
      names.set(k, v);
    return items;
  };
  const tbl = runTable(null, names);
  const p = pager('/api/v1/runs', apiQuery, 50);
  let pagesLoaded = 0;
  const pagerEl = pagedTable(
      tbl,
      {
        get done() {
          return p.done;
        },
        async next(signal) {
          pagesLoaded++;
          return collect(await p.next(signal), signal);
        },
      },
      {
        errors,
        signal: ctx.signal,
        filter: (items) => items.filter(inWindow),
        // Newest first: once a page reaches past the window's start, later pages are older still.
        stop: (items) =>
            !!sinceIso && items.length > 0 && items[items.length - 1].created_at < sinceIso,
      },
  );
  replace(
      ctx.main,
      pageHeader(t('Runs')),
      errors,
      form,
      q.trigger ? notice(t('Only the runs of trigger {id}.', {id: shortId(q.trigger)})) : null,
      sinceIso || untilIso ? h('p', {
        class: 'muted small',
        text:
            t('The time window is applied to the pages as they load (the API lists newest first).')
      }) :
                             null,
      tbl,
      pagerEl,
  );
  await pagerEl.ready;
  // Live: re-read the first page while only it is shown, so new runs appear without a jump.
  ctx.every(2000, async () => {
    if (!live.checked || pagesLoaded > 1) return;
    try {
      const page = await get('/api/v1/runs', {...apiQuery, limit: 50}, ctx.signal);
      tbl.setRows((await collect(page.items || [], ctx.signal)).filter(inWindow));
      pagerEl.recount();
    } catch (err) {
      if (err.name !== 'AbortError') errors.show(err);
    }
  });
}

function attemptTable(attempts, empty) {
  return table(
      [
        {label: '#', class: 'num', cell: (a) => String(a.attempt)},
        {label: t('Status'), cell: (a) => badge(a.status)},
        {label: t('Started'), cell: (a) => timeEl(a.started_at)},
        {label: t('Duration'), class: 'num', cell: (a) => durationEl(a.started_at, a.finished_at)},
        {
          label: t('Exit'),
          class: 'num',
          cell: (a) => (a.exit_code === null ? '—' : String(a.exit_code))
        },
        {
          label: t('Executor'),
          class: 'wide',
          cell: (a) => `${a.executor_type}${a.pid ? ` ${t('pid {pid}', {pid: a.pid})}` : ''}`
        },
        {
          label: t('Error'),
          class: 'wide',
          cell: (a) => (a.error_code ? `${a.error_code}: ${a.error_summary || ''}` : '—')
        },
      ],
      attempts,
      empty,
  );
}

// The log view: a fixed-height box (no layout shift while text arrives) that follows the end
// unless the reader scrolled up.
function logView(attemptSelect, download) {
  const pre = h('pre', {class: 'log', id: 'log', tabindex: '0', 'aria-label': t('Run log')});
  const state = h('span', {class: 'log-state', id: 'log-state', text: ''});
  const box = h('div', {class: 'log-box'},
                h('div', {class: 'log-head'}, attemptSelect, download, state), pre);
  let text = '';
  let trimmed = false;
  let pending = '';
  let frame = 0;
  const flush = () => {
    frame = 0;
    const atEnd = pre.scrollHeight - pre.scrollTop - pre.clientHeight < 24;
    text += pending;
    pending = '';
    if (text.length > LOG_KEEP_CHARS) {
      text = text.slice(text.length - LOG_KEEP_CHARS);
      trimmed = true;
    }
    pre.textContent = trimmed ? `${t('[earlier output not shown]')}\n${text}` : text;
    if (atEnd) pre.scrollTop = pre.scrollHeight;
  };
  box.add = (chunk) => {
    pending += chunk;
    if (!frame) frame = requestAnimationFrame(flush);
  };
  box.reset = () => {
    text = '';
    pending = '';
    trimmed = false;
    pre.textContent = '';
  };
  // The view starts past the log's beginning: say that earlier output is not shown.
  box.startsLate = () => {
    trimmed = true;
  };
  box.state = (s) => {
    state.textContent = s;
  };
  return box;
}

// Shows attempt `attempt` of the run in `view` until `signal` aborts: follows the stream
// while the run is not finished (polling when the server has no stream slot free), else reads
// the file to its end.
async function showLog(runId, attempt, finished, view, signal) {
  view.reset();
  // Only the end of a long log is read: from its last line start within LOG_TAIL_BYTES.
  let offset = 0;
  let skipToLine = false;
  try {
    const head = await readLog(runId, attempt, 0, 1, signal);
    if (head.size > LOG_TAIL_BYTES) {
      offset = head.size - LOG_TAIL_BYTES;
      skipToLine = true;
      view.startsLate();
    }
  } catch (err) {
    if (err.name === 'AbortError') return;
    // No attempt or no log yet: read from the start as it comes.
  }
  // The first chunk read from the middle of the log starts at its next whole line.
  const add = (chunk) => {
    if (skipToLine) {
      const nl = chunk.indexOf('\n');
      if (nl < 0) return;
      chunk = chunk.slice(nl + 1);
      skipToLine = false;
    }
    view.add(chunk);
  };
  if (!finished()) {
    view.state(t('following…'));
    try {
      await followLog(runId, attempt, signal, add, offset);
      view.state(
          finished() ? t('end of log') :
                       t('stream ended (the server closes streams after 10 minutes)'));
      return;
    } catch (err) {
      if (err.name === 'AbortError') return;
      if (err.code !== 'overloaded') {
        view.state(`${err.code}: ${errorText(err)}`);
        return;
      }
      view.state(t('polling every second (no free stream)'));
    }
  }
  const decoder = new TextDecoder();
  for (;;) {
    try {
      const chunk = await readLog(runId, attempt, offset, 1 << 20, signal);
      add(decoder.decode(chunk.bytes, {stream: true}));
      offset = chunk.next;
      if (chunk.eof && finished()) {
        view.state(chunk.exists ? t('end of log') : t('no log'));
        return;
      }
      if (chunk.eof) await new Promise((r) => setTimeout(r, 1000));
    } catch (err) {
      if (err.name !== 'AbortError') view.state(`${err.code}: ${errorText(err)}`);
      return;
    }
  }
}

async function renderRun(ctx) {
  const id = ctx.params.id;
  const errors = errorBox();
  let run = await get(`/api/v1/runs/${id}`, {}, ctx.signal);
  const names = await taskNames([run.task_id], ctx.signal);
  ctx.title(t('Run {id}', {id: shortId(id)}));
  const headActions = h('div', {class: 'actions'});
  const summary = h('div');
  const attemptsBox = h('div');
  const eventsBody = table(
      [
        {label: '#', class: 'num', cell: (e) => String(e.sequence)},
        {label: t('Event'), cell: (e) => h('code', {text: e.type})},
        {label: t('At'), cell: (e) => timeEl(e.created_at)},
        {label: t('By'), class: 'wide', cell: (e) => t(e.actor_type)},
        {
          label: t('Detail'),
          class: 'wide mono clip',
          cell: (e) => (e.payload && Object.keys(e.payload).length ? JSON.stringify(e.payload) : '')
        },
      ],
      null,
      t('No event.'),
  );
  const attemptSel = h('select', {id: 'log-attempt', 'aria-label': t('Attempt')});
  // The whole log of the attempt shown, as a file: read in 1 MiB chunks into a Blob.
  const download = h('button', {type: 'button', class: 'btn subtle', id: 'log-download',
                                text: t('Download')});
  download.addEventListener('click', async () => {
    const attempt = Number(attemptSel.value);
    if (!attempt) return;
    download.disabled = true;
    try {
      const parts = [];
      for (let offset = 0;;) {
        const chunk = await readLog(id, attempt, offset, 1 << 20, ctx.signal);
        parts.push(chunk.bytes);
        if (chunk.eof || chunk.next <= offset) break;
        offset = chunk.next;
      }
      const url = URL.createObjectURL(new Blob(parts, {type: 'text/plain'}));
      const a = h('a', {href: url, download: `run-${shortId(id)}-attempt-${attempt}.log`});
      document.body.append(a);
      a.click();
      a.remove();
      setTimeout(() => URL.revokeObjectURL(url), 60_000);
    } catch (err) {
      if (err.name !== 'AbortError') log.state(`${err.code || ''}: ${errorText(err)}`);
    } finally {
      download.disabled = false;
    }
  });
  const log = logView(attemptSel, download);
  // Search: the server reads the whole log of the attempt shown (the view keeps only its end)
  // and answers the matching lines with their numbers.
  const query = h('input', {type: 'search', id: 'log-search-q', maxlength: 200,
                            placeholder: t('Text to find in the whole log')});
  const found = h('div', {id: 'log-search-results', 'aria-live': 'polite'});
  const searchForm = inlineForm('log-search', [field(t('Search the log'), query)], t('Search'), null,
                                async () => {
    const attempt = Number(attemptSel.value);
    if (!attempt || !query.value) return;
    const r = await get(`/api/v1/runs/${id}/log/search`,
                        {q: query.value, attempt, limit: 200}, ctx.signal);
    const lines = r.matches.map((m) => h(
        'li', {}, h('span', {class: 'muted mono', text: `${m.line}: `}),
        h('code', {class: 'wrap', text: m.truncated ? `${m.text}…` : m.text})));
    replace(found,
            h('p', {class: 'muted small', text: r.matches.length ?
                        t('Matching lines: {n}', {n: r.matches.length}) + (r.more ? ' +' : '') :
                        t('No line matches.')}),
            lines.length ? h('ol', {class: 'log-matches'}, lines) : null);
  }, found);
  const resolveBox = h('div', {id: 'resolve-box'});
  const waitingBox = h('div', {id: 'run-waiting-box'});
  let resolution = null;      // the payload of run.recovery_resolved, once there is one
  let resolverNames = null;   // principal names, read when a person resolved the run
  let paintedActions = null;  // what the buttons on screen are for: finished, recovery, going
  let paintedKey = '';
  const actionsMode = () => TERMINAL.has(run.status) ? 'finished' :
      run.status === 'recovery_required'             ? 'recovery' :
                                                       'going';

  // Repaints what changed since the last paint (buttons only when the run's mode changed, so an
  // armed Cancel or a half-written resolution survives the refresh).
  const paint = () => {
    const key = `${run.version}|${JSON.stringify(run.attempts || [])}|${!!resolution}|${
        JSON.stringify(run.waiting ?? null)}`;
    if (key === paintedKey) return;
    paintedKey = key;
    if (paintedActions !== actionsMode()) paintActions();
    replace(waitingBox, run.waiting ? waitingNotice(run.waiting) : null);
    paintFacts();
  };
  const paintActions = () => {
    paintedActions = actionsMode();
    replace(resolveBox, paintedActions === 'recovery' ? resolveForm() : null);
    replace(
        headActions,
        paintedActions === 'recovery' ?
            null :
            paintedActions === 'going' ?
            actionButton(
                t('Cancel run'),
                'operator',
                async () => {
                  await post(`/api/v1/runs/${id}/cancel`, {reason: 'cancelled from the web panel'});
                  run = await get(`/api/v1/runs/${id}`, {}, ctx.signal);
                  paint();
                },
                {errors, kind: 'danger', confirm: t('Confirm cancel')},
                ) :
            actionButton(
                t('Retry'),
                'operator',
                async () => {
                  const next = await post(`/api/v1/runs/${id}/retry`);
                  ctx.navigate(`/runs/${next.id}`);
                },
                {errors, kind: 'primary'},
                ),
    );
  };
  // A run in recovery_required (an approved run whose attempt was lost after it started) waits
  // for an admin to say how it ended; nothing retries it by itself.
  const resolveForm = () => {
    const explain = notice(
        t('An attempt of this approved run was lost after it started, so it may or may not have done its work. Nothing retries it: an admin resolves it as succeeded, failed, or failed and retried (a new approved run of the same revision).'),
        'warn');
    if (!allowed('admin')) return section(t('Needs resolution'), explain);
    const resolution = select(
        [
          ['succeeded', t('succeeded (it did its work)')], ['failed', t('failed')],
          ['retry', t('retry (fail it and run it again)')]
        ],
        'failed', {id: 'resolve-resolution'});
    const reason =
        h('input', {id: 'resolve-reason', required: true, maxlength: 512, autocomplete: 'off'});
    return section(
        t('Needs resolution'), explain,
        inlineForm(
            'resolve-form',
            [field(t('Resolution'), resolution), field(t('Reason'), reason, t('1–512 characters'))],
            t('Resolve'), 'admin', async () => {
              const answer = await post(
                  `/api/v1/runs/${id}/resolve`,
                  {resolution: resolution.value, reason: reason.value.trim()});
              if (answer.retry_run_id) {
                ctx.navigate(`/runs/${answer.retry_run_id}`);
                return;
              }
              run = await get(`/api/v1/runs/${id}`, {}, ctx.signal);
              paint();
            }));
  };
  // A resolution by a person names them; one without (resolved_by null) came from evidence, such
  // as the late report of the worker that held the lost attempt.
  const resolutionText = () => {
    const by = resolution.resolved_by;
    const who = by ? t('by {name}', {name: resolverNames?.get(by) || shortId(by)}) :
                     t('resolved automatically from evidence');
    return h(
        'span', {id: 'run-resolution'}, h('strong', {text: t(resolution.resolution)}),
        ` — ${who}: `, h('q', {text: resolution.reason || ''}),
        resolution.retry_run_id ?
            h('span', {}, ' (', link(t('the new run'), `/runs/${resolution.retry_run_id}`), ')') :
            null);
  };
  const paintFacts = () => {
    replace(
        summary,
        facts(
            [
              [t('Status'), h('span', {id: 'run-status'}, badge(run.status))],
              [t('Task'), link(names.get(run.task_id), `/tasks/${run.task_id}`)],
              [
                t('Started by'),
                run.trigger_id ? h('span', {}, `${t(run.trigger_type)}${t(', ')}`,
                                   link(t('trigger'), `/triggers/${run.trigger_id}`)) :
                                 t(run.trigger_type)
              ],
              run.scheduled_for ? [t('Scheduled for'), timeEl(run.scheduled_for)] : null,
              [t('Created'), timeEl(run.created_at)],
              [t('Started'), timeEl(run.started_at)],
              [t('Finished'), timeEl(run.finished_at)],
              [t('Duration'), durationEl(run.started_at, run.finished_at)],
              run.exit_code !== null ? [t('Exit code'), String(run.exit_code)] : null,
              run.status === 'skipped' ?
                  [
                    t('Skipped because'),
                    h('span', {id: 'run-skip-reason', text: skipReasonText(run)})
                  ] :
                  run.error_code ? [t('Error'), `${run.error_code}: ${run.error_summary || ''}`] :
                                   null,
              resolution ? [t('Resolution'), resolutionText()] : null,
              run.cancel_requested_at ?
                  [
                    t('Cancel requested'),
                    h('span', {}, timeEl(run.cancel_requested_at), ` (${run.cancel_reason})`)
                  ] :
                  null,
              run.retry_at ? [t('Next attempt at'), timeEl(run.retry_at)] : null,
              run.retry_of_run_id ?
                  [
                    t('Retry of'),
                    link(shortId(run.retry_of_run_id), `/runs/${run.retry_of_run_id}`)
                  ] :
                  null,
              [t('Task revision'), String(run.task_revision)],
              [t('Id'), h('code', {text: run.id})],
            ],
            2),
    );
    replace(
        attemptsBox,
        attemptTable(
            run.attempts || [],
            run.status === 'skipped' ? t('No attempt: the occurrence was skipped.') :
                                       t('No attempt yet.')));
  };
  paint();
  replace(
      ctx.main,
      h('div', {class: 'page-head'},
        h('h1', {}, tParts('Run {id}', {id: h('span', {class: 'mono', text: shortId(id)})})),
        headActions),
      errors,
      resolveBox,
      waitingBox,
      section(null, summary),
      section(t('Attempts'), attemptsBox),
      section(t('Log'), log, searchForm),
      section(t('Events'), eventsBody),
  );

  // Events: read from the last sequence seen.
  let after = 0;
  const events = [];
  const loadEvents = async () => {
    for (;;) {
      const page = await get(`/api/v1/runs/${id}/events`, {after, limit: 500}, ctx.signal);
      const items = page.items || [];
      if (!items.length) break;
      events.push(...items);
      after = page.next_after;
      if (items.length < 500) break;
    }
    eventsBody.setRows(events);
    const resolved = !resolution && events.find((e) => e.type === 'run.recovery_resolved');
    if (resolved) {
      if (resolved.payload?.resolved_by) resolverNames = await principalNames(ctx.signal);
      resolution = resolved.payload || {};
      paint();
    }
  };

  // Log: one stream per attempt chosen; a new attempt is followed as it appears.
  let logController = null;
  let shownAttempt = 0;
  const finishedAttempt = (n) => () => {
    const a = (run.attempts || []).find((x) => x.attempt === n);
    return TERMINAL.has(run.status) ||
        (a && ['succeeded', 'failed', 'cancelled', 'timed_out', 'lost'].includes(a.status));
  };
  const startLog = (n) => {
    logController?.abort();
    logController = new AbortController();
    ctx.signal.addEventListener('abort', () => logController.abort());
    shownAttempt = n;
    showLog(id, n, finishedAttempt(n), log, logController.signal);
  };
  const syncAttempts = () => {
    const numbers = (run.attempts || []).map((a) => a.attempt);
    const had = [...attemptSel.options].map((o) => Number(o.value));
    if (numbers.join() !== had.join()) {
      const latest = numbers[numbers.length - 1];
      replace(attemptSel, numbers.map((n) => h('option', {value: n, text: t('attempt {n}', {n})})));
      attemptSel.value =
          String(shownAttempt && shownAttempt !== had[had.length - 1] ? shownAttempt : latest);
      if (latest && Number(attemptSel.value) !== shownAttempt) startLog(Number(attemptSel.value));
    }
  };
  attemptSel.addEventListener('change', () => startLog(Number(attemptSel.value)));
  if (!(run.attempts || []).length)
    log.state(
        run.status === 'skipped' ? t('no attempt: the occurrence was skipped') :
                                   t('waiting for the first attempt…'));
  syncAttempts();
  await loadEvents();

  // Poll while the run goes on, and once more after it finished for its last events.
  let finishedPolls = TERMINAL.has(run.status) ? 1 : 0;
  ctx.every(1500, async () => {
    if (finishedPolls > 1) return;
    try {
      run = await get(`/api/v1/runs/${id}`, {}, ctx.signal);
      if (TERMINAL.has(run.status)) finishedPolls++;
      paint();
      syncAttempts();
      await loadEvents();
    } catch (err) {
      if (err.name !== 'AbortError') errors.show(err);
    }
  });
}
