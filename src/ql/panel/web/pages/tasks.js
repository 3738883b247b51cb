// Tasks: the cron list (each task's schedules in words, last run, next fire, run now, enable
// and disable; filtered by the server on text in the name, a label and the last run's status),
// one task with its triggers, recent runs and revision history, and the form that creates a
// task or publishes its next revision (with its approval policy and the secrets its
// environment names).

import {get, pager, post} from '../lib/api.js';
import {cronWords} from '../lib/cron.js';
import {debounce, h, randomId, replace} from '../lib/dom.js';
import {durationEl, durationText, shortId, timeEl} from '../lib/format.js';
import {t, tParts} from '../lib/i18n.js';
import {forgetTask} from '../lib/lookup.js';
import {decodeSecretRef, encodeSecretRef, isSecretRef, parseSecretTarget, secretTargetText} from '../lib/secretref.js';
import {durationOf, runBars} from '../lib/run_bars.js';
import {session} from '../lib/session.js';
import {actionButton, actionLink, badge, errorBox, facts, field, href, link, notice, onSubmit, pagedTable, pageHeader, section, select, table} from '../lib/ui.js';

import {runTable} from './runs.js';
import {triggerTable} from './triggers.js';

export const nav = {
  label: t('Tasks'),
  path: '/tasks'
};
export const routes = [
  {pattern: '/tasks', render: renderList},
  {pattern: '/tasks/new', render: (ctx) => renderForm(ctx, null)},
  {
    pattern: '/tasks/:id/edit',
    render: async (ctx) =>
        renderForm(ctx, await get(`/api/v1/tasks/${ctx.params.id}`, {}, ctx.signal))
  },
  {pattern: '/tasks/:id', render: renderTask},
];

// Returns a one-line summary of a task's command.
export function commandText(spec) {
  const c = spec?.command || {};
  if (c.kind === 'shell') return c.command;
  if (c.kind === 'argv') return [c.file, ...(c.args || [])].join(' ');
  if (c.kind === 'script') {
    const pin = c.version ? `${c.script}@${c.version}` : c.script;
    return [t('script {pin}', {pin}), ...(c.args || [])].join(' ');
  }
  return '';
}

// Returns a task's schedules: each trigger's expression in words when it has a common shape
// (else the expression itself), with its zone; a disabled or stale trigger is marked.
function schedulesCell(task) {
  if (!Array.isArray(task.schedules)) return '—';  // a server that does not say
  const list = task.schedules;
  if (!list.length) return h('span', {class: 'muted', text: t('no schedule')});
  return h('ul', {class: 'plain schedules'}, list.map((s) => {
    const words = cronWords(s.expression);
    return h(
        'li', {},
        link(
            words || s.expression, `/triggers/${s.trigger_id}`, {},
            {class: words ? 'schedule-link' : 'schedule-link mono', title: s.expression}),
        h('span', {class: 'zone', text: ` ${s.timezone}`}),
        s.state && s.state !== 'active' ? [' ', badge(s.state)] : null);
  }));
}

// Returns a task's last run: its status, when it was created and how long it ran (ticking
// while it runs), or a dash.
function lastRunCell(task) {
  const r = task.last_run;
  if (r === undefined) return '—';  // a server that does not say
  if (!r) return h('span', {class: 'muted', text: t('never run')});
  return h(
      'div', {class: 'last-run'},
      h('div', {},
        h('a', {href: href(`/runs/${r.id}`), class: 'run-link', title: r.id}, badge(r.status)), ' ',
        h('span', {class: 'muted small'}, durationEl(r.started_at, r.finished_at))),
      h('div', {class: 'small wide'}, timeEl(r.created_at)));
}

const LAST_STATUSES = [
  'succeeded', 'failed', 'running', 'queued', 'cancelled', 'timed_out', 'lost', 'skipped',
  'retry_wait', 'recovery_required', 'none'
];

async function renderList(ctx) {
  ctx.title(t('Tasks'));
  const errors = errorBox();
  const q = ctx.query;
  const search = h('input', {
    type: 'search',
    id: 'task-search',
    placeholder: t('Search the name'),
    value: q.q || '',
    autocomplete: 'off',
  });
  const label = h('input', {
    id: 'task-label',
    class: 'mono',
    placeholder: 'team=ops',
    value: q.label || '',
    autocomplete: 'off',
    spellcheck: 'false',
  });
  const lastStatus = select(
      [
        ['', t('any status')],
        ...LAST_STATUSES.map((s) => [s, s === 'none' ? t('never run') : t(s)])
      ],
      q.last_status || '', {id: 'task-last-status'});
  const reload = () => !ctx.signal.aborted && ctx.navigate('/tasks', {
    q: search.value.trim(),
    label: label.value.trim(),
    last_status: lastStatus.value,
    t: Date.now(),
  });
  const tbl = table(
      [
        {
          label: t('Name'),
          cell: (row) => link(row.name, `/tasks/${row.id}`, {}, {class: 'task-link'}),
        },
        {label: t('Schedule'), cell: schedulesCell},
        {
          label: t('Enabled'),
          class: 'wide',
          cell: (row) => badge(row.enabled ? 'active' : 'disabled'),
        },
        {label: t('Last run'), cell: lastRunCell},
        {label: t('Next fire'), class: 'wide', cell: (row) => timeEl(row.next_fire_at)},
        {
          label: '',
          class: 'row-actions',
          cell: (row) =>
              [actionButton(
                   t('Run now'), 'operator', () => startRun(ctx, row.id, requested),
                   {errors, kind: 'primary'}),
               row.enabled ? actionButton(
                                 t('Disable'), 'admin',
                                 async () => {
                                   await post(`/api/v1/tasks/${row.id}/disable`);
                                   forgetTask(row.id);
                                   reload();
                                 },
                                 {errors, confirm: t('Confirm disable')}) :
                             actionButton(
                                 t('Enable'), 'admin',
                                 async () => {
                                   await post(`/api/v1/tasks/${row.id}/enable`);
                                   forgetTask(row.id);
                                   reload();
                                 },
                                 {errors}),
  ],
        },
      ],
      null,
      q.q || q.label || q.last_status ? t('No task matches.') : t('No task yet.'),
  );
  const requested = h('div', {hidden: true});
  const p = pager('/api/v1/tasks', {q: q.q, label: q.label, last_status: q.last_status}, 50);
  const pagerEl = pagedTable(tbl, p, {errors, signal: ctx.signal});
  // Typing searches the server (debounced); the label and status filters apply when changed.
  const later = debounce(reload, 400);
  search.addEventListener('input', later);
  lastStatus.addEventListener('change', reload);
  label.addEventListener('change', reload);
  const filters =
      h('form', {class: 'filters', id: 'tasks-filters', role: 'search'},
        field(t('Search'), search, t('Text in the task\'s name.')),
        field(t('Label'), label, t('KEY=VALUE')), field(t('Last run'), lastStatus),
        h('div', {class: 'field'}, h('button', {type: 'submit', class: 'btn', text: t('Apply')})));
  filters.addEventListener('submit', (e) => {
    e.preventDefault();
    reload();
  });
  replace(
      ctx.main,
      pageHeader(t('Tasks'), actionLink(t('New task'), 'admin', href('/tasks/new'))),
      errors,
      requested,
      filters,
      tbl,
      pagerEl,
  );
  // Back in the search box after a reload that typing caused.
  if (q.q && document.activeElement === document.body) {
    search.focus();
    search.setSelectionRange(search.value.length, search.value.length);
  }
  await pagerEl.ready;
}

function retryText(retry) {
  if (!retry) return t('none (disabled revision)');
  const extra = retry.max_attempts > 1 ? t(', backoff {from}–{to}', {
    from: durationText(retry.backoff_base_ms),
    to: durationText(retry.backoff_max_ms),
  }) :
                                         '';
  return t('{n} attempt(s)', {n: retry.max_attempts}) + extra +
      t(', safety {safety}', {safety: t(retry.safety)}) +
      (retry.retry_on_lost ? t(', retried when lost') : '') +
      (retry.retry_on_timeout ? t(', retried when timed out') :
                                retry.max_attempts > 1 ? t(', timeouts not retried') : '');
}

// Lists a spec's environment; a secret shows as the reference it is (name and version), with
// a link to the secrets page: the spec never holds a secret's value.
function envList(env) {
  const entries = Object.entries(env || {});
  if (!entries.length) return h('span', {class: 'muted', text: t('none')});
  return h('ul', {class: 'plain mono', id: 'task-env-list'}, entries.map(([k, v]) => {
    if (!isSecretRef(v)) return h('li', {text: `${k}=${v}`});
    const ref = decodeSecretRef(v);
    if (!ref) return h('li', {}, `${k}=`, h('span', {class: 'muted', text: t('(unreadable ref)')}));
    return h(
        'li', {class: 'secret-env'}, `${k} ← ${t('secret')} `,
        link(ref.name, '/secrets', {}, {class: 'chip'}), h('span', {
          class: 'muted',
          text: ref.version ? t(' version {version}', {version: ref.version}) : t(' (current)'),
        }));
  }));
}

// Returns a task's concurrency limit in words.
function concurrencyText(limit) {
  if (limit === null || limit === undefined) return t('unlimited');
  return t(
      limit === 1 ? 'at most {n} unfinished run: a cron occurrence due beyond that is skipped' :
                    'at most {n} unfinished runs: a cron occurrence due beyond that is skipped',
      {n: limit});
}

// Returns a task's approval policy in words.
function approvalText(approval) {
  if (!approval?.required) return t('not required for manual runs');
  const role = approval.approver_role || 'admin';
  const ttl = durationText(approval.ttl_ms ?? 86400000);
  return t(
      'manual runs wait for an {role} to approve (requests expire after {ttl})',
      {role: t(role), ttl});
}

// Returns the panel's answer to starting a run of task `id`: the run's page, or — when the
// task's revision requires approval (202 approval_required) — a notice with the request.
async function startRun(ctx, id, shown) {
  const answer = await post('/api/v1/runs', {task_id: id, idempotency_key: randomId()});
  if (answer.code !== 'approval_required') {
    ctx.navigate(`/runs/${answer.id}`);
    return;
  }
  const role = answer.approval?.approver_role || 'admin';
  replace(
      shown,
      h('div', {class: 'banner info', role: 'status', id: 'approval-requested'},
        h('strong', {text: t('Approval requested. ')}),
        tParts('This task\'s manual runs wait for an {role} to approve them: {request}.', {
          role: t(role),
          request: link(
              t('request {id}', {id: shortId(answer.approval_id)}),
              `/approvals/${answer.approval_id}`, {},
              {class: 'approval-link', title: answer.approval_id}),
        })));
  shown.hidden = false;
}

// How many of a task's newest runs its chart shows.
const CHART_RUNS = 50;

// A task's newest runs (newest first) as bars, oldest on the left, with how many succeeded and
// the median and longest duration of those that ran.
function runChart(runs) {
  if (!runs.length) return h('p', {class: 'muted', text: t('No run yet.')});
  const now = Date.now();
  const ran = runs.filter((r) => r.started_at).map((r) => durationOf(r, now)).sort((a, b) => a - b);
  const ok = runs.filter((r) => r.status === 'succeeded').length;
  const summary = [t('{ok} of {n} succeeded', {ok, n: runs.length})];
  if (ran.length) {
    summary.push(t('median {d}', {d: durationText(ran[Math.floor((ran.length - 1) / 2)])}));
    summary.push(t('longest {d}', {d: durationText(ran[ran.length - 1])}));
  }
  return h('div', {}, runBars([...runs].reverse(), now, CHART_RUNS),
           h('p', {class: 'muted small', id: 'task-chart-summary', text: summary.join(' · ')}));
}

async function renderTask(ctx) {
  const id = ctx.params.id;
  const errors = errorBox();
  const task = await get(`/api/v1/tasks/${id}`, {}, ctx.signal);
  ctx.title(task.name);
  const spec = task.spec || {};
  const requested = h('div', {hidden: true});
  const runNow = actionButton(
      t('Run now'), 'operator', () => startRun(ctx, id, requested), {errors, kind: 'primary'});
  // A script task pinned below its script's latest version offers to move to it, as `ql task
  // repin` does: a new revision pinned to the latest, its triggers repinned with it.
  let repin = null;
  if (spec.command?.kind === 'script') {
    const script = spec.command.script;
    const head = await get(`/api/v1/scripts/${encodeURIComponent(script)}`, {}, ctx.signal)
                     .catch(() => null);
    const latest = head?.latest_version;
    if (latest && latest > spec.command.version) {
      const move = actionButton(t('Repin to version {n}', {n: latest}), 'admin', async () => {
        const command = {...spec.command};
        // An interpreter the entry's extension implied is chosen again for the new entry.
        if (command.interpreter === interpreterOf(command.entry)) delete command.interpreter;
        for (const k of ['version', 'digest', 'scriptKind', 'entry']) delete command[k];
        const body = {
          expected_revision: task.revision,
          name: task.name,
          spec: {...spec, command},
          labels: task.labels || {},
          enabled: task.enabled,
          mutation_id: randomId(),
          repin_triggers: true
        };
        if (task.concurrency != null) body.concurrency = task.concurrency;
        if (task.retry) body.retry = task.retry;
        if (task.approval) body.approval = task.approval;
        await post(`/api/v1/tasks/${id}/revisions`, body);
        forgetTask(id);
        ctx.navigate(`/tasks/${id}`, {t: Date.now()});
      }, {errors});
      repin =
          h('div', {class: 'banner info', role: 'status', id: 'task-repin'},
            t('Script {script} has version {latest}; this task runs version {version}.',
              {script, latest, version: spec.command.version}),
            ' ', move);
    }
  }
  const toggle = task.enabled ?
      actionButton(
          t('Disable'),
          'admin',
          async () => {
            const body = {
              expected_revision: task.revision,
              name: task.name,
              spec,
              labels: task.labels || {},
              enabled: false,
              mutation_id: randomId()
            };
            if (task.concurrency != null) body.concurrency = task.concurrency;
            await post(`/api/v1/tasks/${id}/revisions`, body);
            forgetTask(id);
            ctx.navigate(`/tasks/${id}`, {t: Date.now()});
          },
          {errors, confirm: t('Confirm disable')},
          ) :
      actionLink(t('Enable…'), 'admin', href(`/tasks/${id}/edit`, {enable: '1'}));
  replace(
      ctx.main,
      pageHeader(
          task.name,
          runNow,
          actionLink(t('Edit'), 'admin', href(`/tasks/${id}/edit`)),
          toggle,
          actionLink(t('Add trigger'), 'admin', href('/triggers/new', {task: id})),
          ),
      errors,
      requested,
      repin,
      section(
          null,
          facts(
              [
                [t('State'), badge(task.enabled ? 'active' : 'disabled')],
                [t('Command'), h('code', {class: 'wrap', text: commandText(spec)})],
                spec.command?.kind === 'shell' ? [t('Shell'), spec.command.shell] : null,
                spec.command?.kind === 'script' ?
                    [
                      t('Script'),
                      link(
                          `${spec.command.script} · ${t('version {n}', {n: spec.command.version})}`,
                          `/scripts/${encodeURIComponent(spec.command.script)}`,
                          {version: spec.command.version}, {class: 'script-link'})
                    ] :
                    null,
                spec.placement ?
                    [
                      t('Where it runs'), h('span', {
                        id: 'task-placement-fact',
                        text: [
                          t('pool {pool}', {pool: spec.placement.pool || 'default'}),
                          ...Object.entries(spec.placement.labels || {}).map(([k,
                                                                               v]) => `${k}=${v}`)
                        ].join(' · ')
                      })
                    ] :
                    null,
                [t('Environment'), envList(spec.environment)],
                [
                  t('Working directory'),
                  spec.workingDirectory ||
                      h('span', {class: 'muted', text: t('the task\'s own directory')})
                ],
                [t('Timeout'), durationText(spec.timeoutMs)],
                [t('Retries'), retryText(task.retry)],
                [
                  t('Concurrency'),
                  h('span', {id: 'task-concurrency-limit', text: concurrencyText(task.concurrency)})
                ],
                [
                  t('Approval'), h('span', {id: 'task-approval', text: approvalText(task.approval)})
                ],
                [
                  t('Labels'),
                  Object.keys(task.labels || {}).length ?
                      Object.entries(task.labels)
                          .map(([k, v]) => h('span', {class: 'chip', text: `${k}=${v}`})) :
                      null
                ],
                [
                  t('Revision'), h('span', {}, tParts('{revision}, published {at}', {
                                     revision: String(task.revision),
                                     at: timeEl(task.revision_created_at)
                                   }))
                ],
                [t('Id'), h('code', {text: task.id})],
              ],
              2),
          ),
  );
  const loading = () => h('p', {class: 'muted loading', text: t('Loading…')});
  const triggersBox = h('div', {}, loading());
  const runsBox = h('div', {}, loading());
  const chartBox = h('div', {id: 'task-chart'}, loading());
  const historyBox = h('div', {}, loading());
  ctx.main.append(
      section(t('Triggers'), triggersBox),
      section(t('Durations and outcomes'), chartBox),
      section(t('Recent runs'), runsBox, link(t('All runs of this task'), '/runs', {task: id})),
      section(t('Revision history'), historyBox),
  );
  const [triggers, runs, revisions] = await Promise.all([
    get('/api/v1/triggers', {task_id: id, limit: 100}, ctx.signal),
    get('/api/v1/runs', {task_id: id, limit: CHART_RUNS}, ctx.signal),
    get(`/api/v1/tasks/${id}/revisions`, {}, ctx.signal),
  ]);
  for (const box of [triggersBox, runsBox, historyBox, chartBox]) box.replaceChildren();
  chartBox.append(runChart(runs.items || []));
  const stale = (triggers.items || []).filter((row) => row.state === 'pin_stale');
  if (stale.length) {
    triggersBox.append(notice(
        t('{n} trigger(s) still run an older revision of this task and admit nothing until repinned.',
          {n: stale.length}),
        'warn'));
  }
  triggersBox.append(triggerTable(
      triggers.items || [],
      {errors, onChange: () => ctx.navigate(`/tasks/${id}`, {t: Date.now()}), showTask: false}));
  runsBox.append(runTable((runs.items || []).slice(0, 10), new Map([[id, task.name]])));
  historyBox.append(
      table(
          [
            {label: t('Rev.'), class: 'num', cell: (r) => String(r.revision)},
            {label: t('Published'), cell: (r) => timeEl(r.created_at)},
            {label: t('State'), cell: (r) => badge(r.enabled ? 'active' : 'disabled')},
            {label: t('Name'), class: 'wide', cell: (r) => r.name},
            {
              label: t('Spec'),
              cell: (r) => h(
                  'details', {}, h('summary', {text: commandText(r.spec) || t('spec')}), h('pre', {
                    class: 'json',
                    text: JSON.stringify(
                        {spec: r.spec, labels: r.labels, digest: r.content_digest}, null, 2)
                  })),
            },
          ],
          revisions.items || [],
          ),
  );
}

function linesToMap(text, what) {
  const out = {};
  text.split('\n').forEach((raw, i) => {
    const line = raw.trim();
    if (!line) return;
    const eq = line.indexOf('=');
    if (eq <= 0)
      throw Object.assign(
          new Error(t('{what} line {n} ("{line}") is not NAME=value', {what, n: i + 1, line})),
          {code: 'form'});
    out[line.slice(0, eq)] = line.slice(eq + 1);
  });
  return out;
}

const mapToLines = (m) => Object.entries(m || {}).map(([k, v]) => `${k}=${v}`).join('\n');

// The interpreter a script's entry gets by its extension, exactly as the server picks it
// (InterpreterForPath: the file name's last extension, case as written, not a dotfile), or null.
function interpreterOf(entry) {
  const file = (entry || '').split('/').pop();
  const dot = file.lastIndexOf('.');
  if (dot <= 0) return null;
  return INTERPRETERS.get(file.slice(dot + 1)) || null;
}

const INTERPRETERS = new Map([
  ['js', 'node'], ['mjs', 'node'], ['cjs', 'node'], ['py', 'python3'], ['sh', 'sh'],
  ['bash', 'bash']
]);

// Splits a spec's environment into the plain entries and the secret ones as VAR=NAME[@VERSION]
// lines (a ref that cannot be read stays a plain entry, as stored).
function splitEnvironment(env) {
  const plain = {};
  const secret = {};
  for (const [k, v] of Object.entries(env || {})) {
    const ref = decodeSecretRef(v);
    if (ref)
      secret[k] = secretTargetText(ref);
    else
      plain[k] = v;
  }
  return {plain, secret};
}

// Returns the spec's environment: the plain entries, and each VAR=NAME[@VERSION] line of
// `secretText` as a SecretRef of project `projectId` (as `ql task add --secret-env` writes it).
function environmentOf(plainText, secretText, projectId) {
  const env = linesToMap(plainText, t('environment'));
  for (const [variable, target] of Object.entries(
           linesToMap(secretText, t('secret environment')))) {
    if (variable in env) {
      throw Object.assign(
          new Error(t('{variable} is given both as a value and as a secret', {variable})),
          {code: 'form'});
    }
    const {name, version} =
        parseSecretTarget(target.trim(), t('secret environment {variable}', {variable}));
    env[variable] = encodeSecretRef(projectId, name, version);
  }
  return env;
}

async function renderForm(ctx, task) {
  const editing = !!task;
  const heading = editing ? t('Edit {name}', {name: task.name}) : t('New task');
  ctx.title(heading);
  if (!session.can('admin')) {
    replace(
        ctx.main, pageHeader(heading),
        notice(
            t('Publishing tasks needs the admin role; yours here is {role}.',
              {role: t(session.role())}),
            'warn'));
    return;
  }
  const spec = task?.spec || {};
  // A new task from a script's page (`?script=NAME`) starts as that script at its latest version.
  const fromScript =
      !editing && ctx.query.script ? {kind: 'script', script: ctx.query.script, args: []} : null;
  const cmd = spec.command || fromScript || {kind: 'shell', command: '', shell: '/bin/sh'};
  // The project's scripts (for a script command) and whether runs go to remote workers (then
  // the form says where a run may go).
  const [scriptList, status] = await Promise.all([
    get('/api/v1/scripts', {}, ctx.signal).catch(() => ({items: []})),
    get('/api/v1/status', {}, ctx.signal).catch(() => null),
  ]);
  const retry = task?.retry || {
    max_attempts: 1,
    backoff_base_ms: 1000,
    backoff_max_ms: 60000,
    safety: 'unknown',
    retry_on_lost: false,
    retry_on_timeout: false
  };
  const errors = errorBox();
  const name =
      h('input', {id: 'task-name', required: true, maxlength: 128, value: task?.name || ''});
  const kind = select(
      [
        ['shell', t('Shell command')], ['argv', t('Program and arguments')], ['script', t('Script')]
      ],
      cmd.kind, {id: 'task-kind'});
  const shellCommand =
      h('textarea', {id: 'task-command', rows: 3, class: 'mono', spellcheck: 'false'});
  shellCommand.value = cmd.kind === 'shell' ? cmd.command : '';
  const shell = select(['/bin/sh', '/bin/bash'], cmd.shell || '/bin/sh', {id: 'task-shell'});
  const file = h('input', {
    id: 'task-file',
    class: 'mono',
    value: cmd.kind === 'argv' ? cmd.file : '',
    placeholder: '/usr/bin/tar'
  });
  const args = h('textarea', {id: 'task-args', rows: 3, class: 'mono', spellcheck: 'false'});
  args.value = cmd.kind === 'argv' ? (cmd.args || []).join('\n') : '';
  // A script: one of the project's scripts at a version (the one pinned when editing; empty is
  // its latest, pinned when published), its interpreter and arguments.
  const pinned = cmd.kind === 'script' ? cmd : null;
  const scriptNames =
      (scriptList.items || []).filter((s) => s.status === 'active').map((s) => s.name);
  if (pinned && !scriptNames.includes(pinned.script)) scriptNames.unshift(pinned.script);
  const scriptName = select(
      [
        ['', scriptNames.length ? t('Choose a script') : t('No script yet')],
        ...scriptNames.map((n) => [n, n])
      ],
      pinned ? pinned.script : '', {id: 'task-script'});
  const scriptVersion = h('select', {id: 'task-script-version'});
  // A tree script runs one of its files: the one pinned when the version is unchanged, else the
  // version's own entry; a file script has no choice to make.
  const scriptEntry = h('select', {id: 'task-script-entry'});
  const entryField = field(t('Entry'), scriptEntry, t('The file of the tree that is run.'));
  entryField.hidden = true;
  const loadEntries = async () => {
    const chosen = scriptName.value;
    const version = scriptVersion.value;
    replace(scriptEntry);
    entryField.hidden = true;
    if (!chosen) return;
    let found = null;
    try {
      found = await get(
          `/api/v1/scripts/${encodeURIComponent(chosen)}`, version ? {version} : {}, ctx.signal);
    } catch (err) {
      found = null;
    }
    if (chosen !== scriptName.value || version !== scriptVersion.value)
      return;  // changed meanwhile
    const v = found?.version;
    if (!v || v.kind !== 'tree') return;
    const same = pinned?.script === chosen && String(pinned?.version) === String(v.version);
    const current = same && pinned.entry ? pinned.entry : v.entry;
    replace(
        scriptEntry,
        (v.files ||
         []).map((f) => h('option', {value: f.path, text: f.path, selected: f.path === current})));
    entryField.hidden = false;
  };
  const loadVersions = async () => {
    const chosen = scriptName.value;
    // Nothing to choose (and so no stale version of another script to save) until they arrive.
    replace(scriptVersion);
    scriptVersion.disabled = true;
    const keep = pinned?.version && chosen === pinned.script ? String(pinned.version) : '';
    let versions = [];
    if (chosen) {
      try {
        versions =
            (await get(`/api/v1/scripts/${encodeURIComponent(chosen)}/versions`, {}, ctx.signal))
                .items ||
            [];
      } catch (err) {
        versions = [];
      }
    }
    if (chosen !== scriptName.value) return;  // another script was chosen meanwhile
    scriptVersion.disabled = false;
    const numbers = versions.map((v) => String(v.version));
    if (keep && !numbers.includes(keep)) numbers.push(keep);
    numbers.sort((a, b) => Number(b) - Number(a));
    const latest = versions.length ? Math.max(...versions.map((v) => v.version)) : null;
    replace(
        scriptVersion, h('option', {
          value: '',
          text: latest ? t('Latest (version {n})', {n: latest}) : t('Latest'),
          selected: keep === ''
        }),
        numbers.map(
            (n) => h('option', {value: n, text: t('version {n}', {n}), selected: n === keep})));
    await loadEntries();
  };
  scriptName.addEventListener('change', loadVersions);
  scriptVersion.addEventListener('change', loadEntries);
  await loadVersions();
  const entryInterpreter = pinned ? interpreterOf(pinned.entry) : null;
  const interpreter = select(
      [['', t('By the file\'s extension')], 'node', 'python3', 'sh', 'bash'],
      pinned?.interpreter && pinned.interpreter !== entryInterpreter ? pinned.interpreter : '',
      {id: 'task-interpreter'});
  const scriptArgs =
      h('textarea', {id: 'task-script-args', rows: 2, class: 'mono', spellcheck: 'false'});
  scriptArgs.value = pinned ? (pinned.args || []).join('\n') : '';
  // Where a run may go: a pool and the labels its worker must carry (remote workers only).
  const placement = spec.placement || null;
  const remote = status?.executor_type === 'remote_worker' || !!placement;
  const pool = h('input', {
    id: 'task-pool',
    class: 'mono',
    value: placement?.pool && placement.pool !== 'default' ? placement.pool : '',
    placeholder: 'default'
  });
  const workerLabels = h('textarea', {
    id: 'task-worker-labels',
    rows: 2,
    class: 'mono',
    spellcheck: 'false',
    placeholder: 'arch=x86'
  });
  workerLabels.value = mapToLines(placement?.labels);
  const env =
      h('textarea',
        {id: 'task-env', rows: 3, class: 'mono', spellcheck: 'false', placeholder: 'TZ=UTC'});
  const {plain: plainEnv, secret: secretEnvMap} = splitEnvironment(spec.environment);
  env.value = mapToLines(plainEnv);
  const secretEnv = h('textarea', {
    id: 'task-secret-env',
    rows: 2,
    class: 'mono',
    spellcheck: 'false',
    placeholder: 'GITHUB_TOKEN=github-token'
  });
  secretEnv.value = mapToLines(secretEnvMap);
  const workdir = h('input', {
    id: 'task-workdir',
    class: 'mono',
    value: spec.workingDirectory || '',
    placeholder: t('(the task\'s own directory)')
  });
  const timeout = h('input', {
    id: 'task-timeout',
    type: 'number',
    min: '0.001',
    step: 'any',
    value: spec.timeoutMs ? String(spec.timeoutMs / 1000) : '',
    placeholder: '86400'
  });
  const concurrency = h('input', {
    id: 'task-concurrency',
    type: 'number',
    min: 1,
    max: 10000,
    step: 1,
    value: task?.concurrency != null ? String(task.concurrency) : '',
    placeholder: t('unlimited')
  });
  const whole = (id, value, min, max) =>
      h('input', {id, type: 'number', min, max, step: 1, value: String(value)});
  const attempts = whole('task-attempts', retry.max_attempts, 1, 16);
  const backoffBase = whole('task-backoff-base', retry.backoff_base_ms, 0);
  const backoffMax = whole('task-backoff-max', retry.backoff_max_ms, 0);
  const safety = select(
      ['unknown', 'idempotent', 'deduplicated'].map((v) => [v, t(v)]), retry.safety,
      {id: 'task-safety'});
  const onLost = h('input', {type: 'checkbox', id: 'task-on-lost', checked: retry.retry_on_lost});
  const onTimeout =
      h('input', {type: 'checkbox', id: 'task-on-timeout', checked: !!retry.retry_on_timeout});
  const labels =
      h('textarea',
        {id: 'task-labels', rows: 2, class: 'mono', spellcheck: 'false', placeholder: 'team=ops'});
  labels.value = mapToLines(task?.labels);
  const approval = task?.approval || null;
  const needsApproval =
      h('input', {type: 'checkbox', id: 'task-approval', checked: !!approval?.required});
  const approverRole = select(
      [['admin', t('admin (or owner)')], ['owner', t('owner')]], approval?.approver_role || 'admin',
      {id: 'task-approver-role'});
  const approvalTtl = h('input', {
    id: 'task-approval-ttl',
    type: 'number',
    min: '0.001',
    max: '720',
    step: 'any',
    value: approval?.ttl_ms ? String(approval.ttl_ms / 3600000) : '',
    placeholder: '24'
  });
  const approvalFields = h(
      'div', {class: 'row'}, field(t('Approver role'), approverRole),
      field(t('Request expires after (hours)'), approvalTtl, t('Empty: 24 hours; 1 s – 30 days.')));
  const syncApproval = () => {
    approvalFields.hidden = !needsApproval.checked;
  };
  needsApproval.addEventListener('change', syncApproval);
  syncApproval();
  const enabled = h('input', {
    type: 'checkbox',
    id: 'task-enabled',
    checked: editing ? task.enabled || ctx.query.enable === '1' : true
  });

  const shellFields =
      h('div', {class: 'group'},
        field(t('Command'), shellCommand, t('Run by the shell below with -c.')),
        field(t('Shell'), shell));
  const argvFields =
      h('div', {class: 'group'}, field(t('Program'), file, t('Absolute path of the executable.')),
        field(t('Arguments'), args, t('One argument per line.')));
  const scriptFields = h(
      'div', {class: 'group'},
      field(
          t('Script'), scriptName,
          scriptNames.length ? t('A script of this project (Scripts page).') :
                               t('No script in this project yet: add one on the Scripts page.')),
      field(
          t('Version'), scriptVersion,
          t('Publishing pins this version; a later push changes nothing until the task is published again with Latest.')),
      entryField, field(t('Interpreter'), interpreter),
      field(t('Arguments'), scriptArgs, t('One argument per line.')));
  const syncKind = () => {
    shellFields.hidden = kind.value !== 'shell';
    argvFields.hidden = kind.value !== 'argv';
    scriptFields.hidden = kind.value !== 'script';
  };
  kind.addEventListener('change', syncKind);
  syncKind();

  const mutationId = randomId();
  const submit = h('button', {
    type: 'submit',
    class: 'btn primary',
    id: 'task-save',
    text: editing ? t('Publish revision') : t('Create task')
  });
  const form = h(
      'form',
      {class: 'card form', id: 'task-form', novalidate: true},
      errors,
      field(t('Name'), name),
      field(t('Command kind'), kind),
      shellFields,
      argvFields,
      scriptFields,
      remote ?
          h('fieldset', {id: 'task-placement'}, h('legend', {text: t('Where it runs')}),
            h('div', {class: 'row'}, field(t('Pool'), pool, t('Empty: the default pool.')),
              field(
                  t('Worker labels'), workerLabels,
                  t('One key=value per line: only a worker carrying every one takes the runs.')))) :
          null,
      field(t('Environment'), env, t('One NAME=value per line.')),
      field(
          t('Secret environment'), secretEnv,
          t('One NAME=secret[@version] per line: the variable gets the secret\'s value when an attempt starts (no version: its current one). The task keeps only the reference.')),
      field(
          t('Working directory'), workdir,
          t('Absolute path; empty runs the command in the task\'s own directory.')),
      field(t('Timeout (seconds)'), timeout, t('Empty: 24 hours.')),
      field(
          t('Concurrency'), concurrency,
          t('At most this many unfinished runs (1–10000) when a cron occurrence comes due; one beyond it is recorded as skipped. Manual runs are not limited but count. Empty: unlimited.')),
      h(
          'fieldset',
          {},
          h('legend', {text: t('Retries')}),
          h('div', {class: 'row'}, field(t('Attempts'), attempts, t('1–16')),
            field(t('Backoff base (ms)'), backoffBase), field(t('Backoff max (ms)'), backoffMax)),
          h('div', {class: 'row'},
            field(t('Safety'), safety, t('Whether running the command twice is harmless.')),
            h('div', {class: 'field check'}, onLost,
              h('label',
                { for: onLost.id, text: t('Retry when the attempt is lost')
                })),
            h('div', {class: 'field check'}, onTimeout,
              h('label',
                { for: onTimeout.id, text: t('Retry when the attempt times out')
                }))),
          ),
      h('fieldset', {}, h('legend', {text: t('Approval')}),
        h('div', {class: 'field check'}, needsApproval,
          h('label',
            { for: needsApproval.id,
              text: t('Manual runs need approval (cron occurrences run as usual)')
            })),
        approvalFields),
      field(t('Labels'), labels, t('One key=value per line.')),
      h('div', {class: 'field check'}, enabled,
        h('label',
          { for: enabled.id, text: t('Enabled (runs may start)')
          })),
      editing && !task.retry ?
          notice(
              t('This revision is disabled and kept no retry policy: check the retries above before enabling it.'),
              'warn') :
          null,
      h('div', {class: 'actions'}, submit, h('a', {
          class: 'btn subtle',
          href: editing ? href(`/tasks/${task.id}`) : href('/tasks'),
          text: t('Cancel')
        })),
  );
  onSubmit(form, errors, async () => {
    let command;
    if (kind.value === 'shell') {
      command = {kind: 'shell', command: shellCommand.value, shell: shell.value};
    } else if (kind.value === 'argv') {
      command = {
        kind: 'argv',
        file: file.value.trim(),
        args: args.value === '' ? [] : args.value.split('\n')
      };
    } else {
      if (!scriptName.value)
        throw Object.assign(new Error(t('Choose the script the task runs.')), {code: 'form'});
      command = {
        kind: 'script',
        script: scriptName.value,
        args: scriptArgs.value === '' ? [] : scriptArgs.value.split('\n')
      };
      if (scriptVersion.value) command.version = Number(scriptVersion.value);
      // A tree's entry as chosen; a file's is its name.
      if (!entryField.hidden && scriptEntry.value) command.entry = scriptEntry.value;
      if (interpreter.value) command.interpreter = interpreter.value;
    }
    // A ref names a secret of the task's own project: the one the server resolves `?project=`
    // to, asked only when the form names a secret (as `ql task add --secret-env` does).
    const projectId = editing  ? task.project_id :
        secretEnv.value.trim() ? (status || await get('/api/v1/status')).project.id :
                                 '';
    // Spec fields this form does not edit (limits, network, isolation) are kept as they are.
    const kept = {...spec};
    for (const k of ['command', 'environment', 'workingDirectory', 'timeoutMs', 'placement'])
      delete kept[k];
    const body = {
      name: name.value.trim(),
      spec: {...kept, command, environment: environmentOf(env.value, secretEnv.value, projectId)},
      labels: linesToMap(labels.value, 'labels'),
      enabled: enabled.checked,
      mutation_id: mutationId,
    };
    if (workdir.value.trim()) body.spec.workingDirectory = workdir.value.trim();
    if (remote) {
      const where = {
        pool: pool.value.trim() || 'default',
        labels: linesToMap(workerLabels.value, t('worker labels'))
      };
      if (where.pool !== 'default' || Object.keys(where.labels).length) body.spec.placement = where;
    } else if (placement) {
      body.spec.placement = placement;
    }
    if (timeout.value !== '') body.spec.timeoutMs = Math.round(Number(timeout.value) * 1000);
    // A number field reads as '' when what was typed is not a number: refuse rather than
    // publish "unlimited". Out-of-range and fractional values go to the server, which names them.
    if (concurrency.validity.badInput)
      throw Object.assign(new Error(t('concurrency is not a number')), {code: 'form'});
    if (concurrency.value !== '') body.concurrency = Number(concurrency.value);
    if (enabled.checked) {
      body.retry = {
        max_attempts: Number(attempts.value),
        backoff_base_ms: Number(backoffBase.value),
        backoff_max_ms: Number(backoffMax.value),
        safety: safety.value,
        retry_on_lost: onLost.checked,
        retry_on_timeout: onTimeout.checked,
      };
    }
    if (needsApproval.checked) {
      body.approval = {required: true, approver_role: approverRole.value};
      if (approvalTtl.value !== '')
        body.approval.ttl_ms = Math.round(Number(approvalTtl.value) * 3600000);
    }
    let saved;
    if (editing) {
      saved = await post(
          `/api/v1/tasks/${task.id}/revisions`, {...body, expected_revision: task.revision});
      forgetTask(task.id);
    } else {
      saved = await post('/api/v1/tasks', body);
    }
    ctx.navigate(`/tasks/${saved.id}`);
  });
  replace(
      ctx.main,
      pageHeader(
          editing ?
              t('Edit {name} (revision {revision})', {name: task.name, revision: task.revision}) :
              t('New task')),
      form);
  name.focus();
}
