// Tasks: the list (search over the loaded pages), one task with its triggers, recent runs and
// revision history, and the form that creates a task or publishes its next revision (with its
// approval policy and the secrets its environment names).

import {get, pager, post} from '../lib/api.js';
import {h, randomId, replace} from '../lib/dom.js';
import {durationText, shortId, timeEl} from '../lib/format.js';
import {forgetTask} from '../lib/lookup.js';
import {decodeSecretRef, encodeSecretRef, isSecretRef, parseSecretTarget, secretTargetText} from '../lib/secretref.js';
import {session} from '../lib/session.js';
import {actionButton, actionLink, badge, errorBox, facts, field, href, link, notice, onSubmit, pagedTable, pageHeader, section, select, table} from '../lib/ui.js';

import {runTable} from './runs.js';
import {triggerTable} from './triggers.js';

export const nav = {
  label: 'Tasks',
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
  return '';
}

function searchText(task) {
  return [
    task.name, commandText(task.spec),
    ...Object.entries(task.labels || {}).map(([k, v]) => `${k}=${v}`)
  ].join(' ')
      .toLowerCase();
}

async function renderList(ctx) {
  ctx.title('Tasks');
  const errors = errorBox();
  const search = h('input', {
    type: 'search',
    id: 'task-search',
    placeholder: 'Search name, command, label',
    value: ctx.query.q || ''
  });
  const all = [];
  const tbl = table(
      [
        {label: 'Name', cell: (t) => link(t.name, `/tasks/${t.id}`, {}, {class: 'task-link'})},
        {label: 'State', cell: (t) => badge(t.enabled ? 'active' : 'disabled')},
        {label: 'Command', class: 'wide mono clip', cell: (t) => commandText(t.spec)},
        {label: 'Rev.', class: 'num', cell: (t) => String(t.revision)},
        {label: 'Updated', class: 'wide', cell: (t) => timeEl(t.updated_at)},
      ],
      [],
      'No task yet.',
  );
  const matches = () => {
    const q = search.value.trim().toLowerCase();
    return q ? all.filter((t) => searchText(t).includes(q)) : all;
  };
  const p = pager('/api/v1/tasks', {}, 50);
  const pagerEl = pagedTable(tbl, p, {
    errors,
    signal: ctx.signal,
    filter: (items) => {
      all.push(...items);
      const q = search.value.trim().toLowerCase();
      return q ? items.filter((t) => searchText(t).includes(q)) : items;
    },
  });
  search.addEventListener('input', () => tbl.setRows(matches()));
  replace(
      ctx.main,
      pageHeader('Tasks', actionLink('New task', 'admin', href('/tasks/new'))),
      errors,
      h('div', {class: 'toolbar'},
        field('Search', search, 'Searches the tasks loaded so far; "Load more" widens it.')),
      tbl,
      pagerEl,
  );
  await pagerEl.ready;
}

function retryText(retry) {
  if (!retry) return 'none (disabled revision)';
  const extra = retry.max_attempts > 1 ?
      `, backoff ${durationText(retry.backoff_base_ms)}–${durationText(retry.backoff_max_ms)}` :
      '';
  return `${retry.max_attempts} attempt(s)${extra}, safety ${retry.safety}${
      retry.retry_on_lost ? ', retried when lost' : ''}`;
}

// Lists a spec's environment; a secret shows as the reference it is (name and version), with
// a link to the secrets page: the spec never holds a secret's value.
function envList(env) {
  const entries = Object.entries(env || {});
  if (!entries.length) return h('span', {class: 'muted', text: 'none'});
  return h('ul', {class: 'plain mono', id: 'task-env-list'}, entries.map(([k, v]) => {
    if (!isSecretRef(v)) return h('li', {text: `${k}=${v}`});
    const ref = decodeSecretRef(v);
    if (!ref) return h('li', {}, `${k}=`, h('span', {class: 'muted', text: '(unreadable ref)'}));
    return h(
        'li', {class: 'secret-env'}, `${k} ← secret `,
        link(ref.name, '/secrets', {}, {class: 'chip'}),
        h('span', {class: 'muted', text: ref.version ? ` version ${ref.version}` : ' (current)'}));
  }));
}

// Returns a task's concurrency limit in words.
function concurrencyText(limit) {
  if (limit === null || limit === undefined) return 'unlimited';
  return `at most ${limit} unfinished run${limit === 1 ? '' : 's'}: ` +
      'a cron occurrence due beyond that is skipped';
}

// Returns a task's approval policy in words.
function approvalText(approval) {
  if (!approval?.required) return 'not required for manual runs';
  const role = approval.approver_role || 'admin';
  const ttl = durationText(approval.ttl_ms ?? 86400000);
  return `manual runs wait for an ${role} to approve (requests expire after ${ttl})`;
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
        h('strong', {text: 'Approval requested. '}),
        `This task's manual runs wait for an ${role} to approve them: `,
        link(
            `request ${shortId(answer.approval_id)}`, `/approvals/${answer.approval_id}`, {},
            {class: 'approval-link', title: answer.approval_id}),
        '.'));
  shown.hidden = false;
}

async function renderTask(ctx) {
  const id = ctx.params.id;
  const errors = errorBox();
  const task = await get(`/api/v1/tasks/${id}`, {}, ctx.signal);
  ctx.title(task.name);
  const spec = task.spec || {};
  const requested = h('div', {hidden: true});
  const runNow = actionButton(
      'Run now', 'operator', () => startRun(ctx, id, requested), {errors, kind: 'primary'});
  const toggle = task.enabled ?
      actionButton(
          'Disable',
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
          {errors, confirm: 'Confirm disable'},
          ) :
      actionLink('Enable…', 'admin', href(`/tasks/${id}/edit`, {enable: '1'}));
  replace(
      ctx.main,
      pageHeader(
          task.name,
          runNow,
          actionLink('Edit', 'admin', href(`/tasks/${id}/edit`)),
          toggle,
          actionLink('Add trigger', 'admin', href('/triggers/new', {task: id})),
          ),
      errors,
      requested,
      section(
          null,
          facts(
              [
                ['State', badge(task.enabled ? 'active' : 'disabled')],
                ['Command', h('code', {class: 'wrap', text: commandText(spec)})],
                spec.command?.kind === 'shell' ? ['Shell', spec.command.shell] : null,
                ['Environment', envList(spec.environment)],
                [
                  'Working directory',
                  spec.workingDirectory ||
                      h('span', {class: 'muted', text: 'the task\'s own directory'})
                ],
                ['Timeout', durationText(spec.timeoutMs)],
                ['Retries', retryText(task.retry)],
                [
                  'Concurrency',
                  h('span', {id: 'task-concurrency-limit', text: concurrencyText(task.concurrency)})
                ],
                ['Approval', h('span', {id: 'task-approval', text: approvalText(task.approval)})],
                [
                  'Labels',
                  Object.keys(task.labels || {}).length ?
                      Object.entries(task.labels)
                          .map(([k, v]) => h('span', {class: 'chip', text: `${k}=${v}`})) :
                      null
                ],
                [
                  'Revision',
                  h('span', {}, `${task.revision}, published `, timeEl(task.revision_created_at))
                ],
                ['Id', h('code', {text: task.id})],
              ],
              2),
          ),
  );
  const triggersBox = h('div');
  const runsBox = h('div');
  const historyBox = h('div');
  ctx.main.append(
      section('Triggers', triggersBox),
      section('Recent runs', runsBox, link('All runs of this task', '/runs', {task: id})),
      section('Revision history', historyBox),
  );
  const [triggers, runs, revisions] = await Promise.all([
    get('/api/v1/triggers', {task_id: id, limit: 100}, ctx.signal),
    get('/api/v1/runs', {task_id: id, limit: 10}, ctx.signal),
    get(`/api/v1/tasks/${id}/revisions`, {}, ctx.signal),
  ]);
  const stale = (triggers.items || []).filter((t) => t.state === 'pin_stale');
  if (stale.length) {
    triggersBox.append(notice(
        `${stale.length} trigger(s) still run an older revision of this task and admit nothing until repinned.`,
        'warn'));
  }
  triggersBox.append(triggerTable(
      triggers.items || [],
      {errors, onChange: () => ctx.navigate(`/tasks/${id}`, {t: Date.now()}), showTask: false}));
  runsBox.append(runTable(runs.items || [], new Map([[id, task.name]])));
  historyBox.append(
      table(
          [
            {label: 'Rev.', class: 'num', cell: (r) => String(r.revision)},
            {label: 'Published', cell: (r) => timeEl(r.created_at)},
            {label: 'State', cell: (r) => badge(r.enabled ? 'active' : 'disabled')},
            {label: 'Name', class: 'wide', cell: (r) => r.name},
            {
              label: 'Spec',
              cell: (r) =>
                  h('details', {}, h('summary', {text: commandText(r.spec) || 'spec'}), h('pre', {
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
          new Error(`${what} line ${i + 1} ("${line}") is not NAME=value`), {code: 'form'});
    out[line.slice(0, eq)] = line.slice(eq + 1);
  });
  return out;
}

const mapToLines = (m) => Object.entries(m || {}).map(([k, v]) => `${k}=${v}`).join('\n');

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
  const env = linesToMap(plainText, 'environment');
  for (const [variable, target] of Object.entries(linesToMap(secretText, 'secret environment'))) {
    if (variable in env) {
      throw Object.assign(
          new Error(`${variable} is given both as a value and as a secret`), {code: 'form'});
    }
    const {name, version} = parseSecretTarget(target.trim(), `secret environment ${variable}`);
    env[variable] = encodeSecretRef(projectId, name, version);
  }
  return env;
}

async function renderForm(ctx, task) {
  const editing = !!task;
  ctx.title(editing ? `Edit ${task.name}` : 'New task');
  if (!session.can('admin')) {
    replace(
        ctx.main, pageHeader(editing ? `Edit ${task.name}` : 'New task'),
        notice(`Publishing tasks needs the admin role; yours here is ${session.role()}.`, 'warn'));
    return;
  }
  const spec = task?.spec || {};
  const cmd = spec.command || {kind: 'shell', command: '', shell: '/bin/sh'};
  const retry = task?.retry || {
    max_attempts: 1,
    backoff_base_ms: 1000,
    backoff_max_ms: 60000,
    safety: 'unknown',
    retry_on_lost: false
  };
  const errors = errorBox();
  const name =
      h('input', {id: 'task-name', required: true, maxlength: 128, value: task?.name || ''});
  const kind = select(
      [['shell', 'Shell command'], ['argv', 'Program and arguments']], cmd.kind, {id: 'task-kind'});
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
    placeholder: '(the task\'s own directory)'
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
    placeholder: 'unlimited'
  });
  const whole = (id, value, min, max) =>
      h('input', {id, type: 'number', min, max, step: 1, value: String(value)});
  const attempts = whole('task-attempts', retry.max_attempts, 1, 16);
  const backoffBase = whole('task-backoff-base', retry.backoff_base_ms, 0);
  const backoffMax = whole('task-backoff-max', retry.backoff_max_ms, 0);
  const safety =
      select(['unknown', 'idempotent', 'deduplicated'], retry.safety, {id: 'task-safety'});
  const onLost = h('input', {type: 'checkbox', id: 'task-on-lost', checked: retry.retry_on_lost});
  const labels =
      h('textarea',
        {id: 'task-labels', rows: 2, class: 'mono', spellcheck: 'false', placeholder: 'team=ops'});
  labels.value = mapToLines(task?.labels);
  const approval = task?.approval || null;
  const needsApproval =
      h('input', {type: 'checkbox', id: 'task-approval', checked: !!approval?.required});
  const approverRole = select(
      [['admin', 'admin (or owner)'], ['owner', 'owner']], approval?.approver_role || 'admin',
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
      'div', {class: 'row'}, field('Approver role', approverRole),
      field('Request expires after (hours)', approvalTtl, 'Empty: 24 hours; 1 s – 30 days.'));
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
      h('div', {class: 'group'}, field('Command', shellCommand, 'Run by the shell below with -c.'),
        field('Shell', shell));
  const argvFields =
      h('div', {class: 'group'}, field('Program', file, 'Absolute path of the executable.'),
        field('Arguments', args, 'One argument per line.'));
  const syncKind = () => {
    shellFields.hidden = kind.value !== 'shell';
    argvFields.hidden = kind.value !== 'argv';
  };
  kind.addEventListener('change', syncKind);
  syncKind();

  const mutationId = randomId();
  const submit = h('button', {
    type: 'submit',
    class: 'btn primary',
    id: 'task-save',
    text: editing ? 'Publish revision' : 'Create task'
  });
  const form = h(
      'form',
      {class: 'card form', id: 'task-form', novalidate: true},
      errors,
      field('Name', name),
      field('Command kind', kind),
      shellFields,
      argvFields,
      field('Environment', env, 'One NAME=value per line.'),
      field(
          'Secret environment', secretEnv,
          'One NAME=secret[@version] per line: the variable gets the secret\'s value when an attempt starts (no version: its current one). The task keeps only the reference.'),
      field(
          'Working directory', workdir,
          'Absolute path; empty runs the command in the task\'s own directory.'),
      field('Timeout (seconds)', timeout, 'Empty: 24 hours.'),
      field(
          'Concurrency', concurrency,
          'At most this many unfinished runs (1–10000) when a cron occurrence comes due; one beyond it is recorded as skipped. Manual runs are not limited but count. Empty: unlimited.'),
      h(
          'fieldset',
          {},
          h('legend', {text: 'Retries'}),
          h('div', {class: 'row'}, field('Attempts', attempts, '1–16'),
            field('Backoff base (ms)', backoffBase), field('Backoff max (ms)', backoffMax)),
          h('div', {class: 'row'},
            field('Safety', safety, 'Whether running the command twice is harmless.'),
            h('div', {class: 'field check'}, onLost,
              h('label',
                { for: onLost.id, text: 'Retry when the attempt is lost'
                }))),
          ),
      h('fieldset', {}, h('legend', {text: 'Approval'}),
        h('div', {class: 'field check'}, needsApproval,
          h('label',
            { for: needsApproval.id,
              text: 'Manual runs need approval (cron occurrences run as usual)'
            })),
        approvalFields),
      field('Labels', labels, 'One key=value per line.'),
      h('div', {class: 'field check'}, enabled,
        h('label',
          { for: enabled.id, text: 'Enabled (runs may start)'
          })),
      editing && !task.retry ?
          notice(
              'This revision is disabled and kept no retry policy: check the retries above before enabling it.',
              'warn') :
          null,
      h('div', {class: 'actions'}, submit, h('a', {
          class: 'btn subtle',
          href: editing ? href(`/tasks/${task.id}`) : href('/tasks'),
          text: 'Cancel'
        })),
  );
  onSubmit(form, errors, async () => {
    const command = kind.value === 'shell' ?
        {kind: 'shell', command: shellCommand.value, shell: shell.value} :
        {
          kind: 'argv',
          file: file.value.trim(),
          args: args.value === '' ? [] : args.value.split('\n')
        };
    // A ref names a secret of the task's own project: the one the server resolves `?project=`
    // to, asked only when the form names a secret (as `ql task add --secret-env` does).
    const projectId = editing ? task.project_id :
        secretEnv.value.trim() ? (await get('/api/v1/status')).project.id :
                                 '';
    const body = {
      name: name.value.trim(),
      spec: {command, environment: environmentOf(env.value, secretEnv.value, projectId)},
      labels: linesToMap(labels.value, 'labels'),
      enabled: enabled.checked,
      mutation_id: mutationId,
    };
    if (workdir.value.trim()) body.spec.workingDirectory = workdir.value.trim();
    if (timeout.value !== '') body.spec.timeoutMs = Math.round(Number(timeout.value) * 1000);
    // A number field reads as '' when what was typed is not a number: refuse rather than
    // publish "unlimited". Out-of-range and fractional values go to the server, which names them.
    if (concurrency.validity.badInput)
      throw Object.assign(new Error('concurrency is not a number'), {code: 'form'});
    if (concurrency.value !== '') body.concurrency = Number(concurrency.value);
    if (enabled.checked) {
      body.retry = {
        max_attempts: Number(attempts.value),
        backoff_base_ms: Number(backoffBase.value),
        backoff_max_ms: Number(backoffMax.value),
        safety: safety.value,
        retry_on_lost: onLost.checked,
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
      ctx.main, pageHeader(editing ? `Edit ${task.name} (revision ${task.revision})` : 'New task'),
      form);
  name.focus();
}
