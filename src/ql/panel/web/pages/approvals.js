// Approvals: the project's approval requests (a manual run of a task whose revision requires
// approval waits as one), filtered by status and paged by the API's cursor, and one request
// with its decision, approved action, receipt and run. The request's approver role approves
// or rejects (with a reason); its requester may withdraw it. The server refuses an approval by
// the requester itself (approval_self) and says why.

import {get, pager, post} from '../lib/api.js';
import {h, replace} from '../lib/dom.js';
import {shortId, timeEl} from '../lib/format.js';
import {t, tParts} from '../lib/i18n.js';
import {principalNames, taskNames} from '../lib/lookup.js';
import {session} from '../lib/session.js';
import {actionButton, allowed, badge, errorBox, facts, field, inlineForm, link, notice, pagedTable, pageHeader, section, select, table} from '../lib/ui.js';

export const nav = {
  label: t('Approvals'),
  path: '/approvals'
};
export const routes = [
  {pattern: '/approvals', render: renderList},
  {pattern: '/approvals/:id', render: renderApproval},
];

const STATUSES = ['pending', 'approved', 'rejected', 'expired'];

// Returns a principal's name, "you" for the caller, or its short id.
function principalText(names, id) {
  if (!id) return '—';
  const you = id === session.who?.principal?.id;
  if (you) return h('span', {title: id, text: t('{name} (you)', {name: names.get(id)})});
  return h('span', {title: id, text: names.get(id) || shortId(id)});
}

// Returns the id of the run an approval started, or null.
function runOf(a) {
  return a.receipt?.run_id || a.action?.run_id || null;
}

async function renderList(ctx) {
  ctx.title(t('Approvals'));
  // Pending requests unless the filter says otherwise ('all' lists every status).
  const status = ctx.query.status ?? 'pending';
  const errors = errorBox();
  const names = await principalNames(ctx.signal);
  const tasks = new Map();
  const statusSel = select(
      [['all', t('any status')], ...STATUSES.map((s) => [s, t(s)])], status || 'all',
      {id: 'approvals-status'});
  const filters =
      h('form', {class: 'filters', id: 'approvals-filters'}, field(t('Status'), statusSel),
        h('div', {class: 'field'}, h('button', {type: 'submit', class: 'btn', text: t('Apply')})));
  filters.addEventListener('submit', (e) => {
    e.preventDefault();
    ctx.navigate('/approvals', {status: statusSel.value});
  });
  const tbl = table(
      [
        {
          label: t('Request'),
          cell: (a) => link(
              shortId(a.id), `/approvals/${a.id}`, {}, {class: 'mono approval-link', title: a.id})
        },
        {
          label: t('Task'),
          cell: (a) => link(tasks.get(a.task_id) || shortId(a.task_id), `/tasks/${a.task_id}`)
        },
        {label: t('Status'), cell: (a) => badge(a.status)},
        {label: t('Requested by'), cell: (a) => principalText(names, a.requester_id)},
        {label: t('Approver'), class: 'wide', cell: (a) => t(a.approver_role)},
        {label: t('Requested'), cell: (a) => timeEl(a.created_at)},
        {
          label: t('Decided or expires'),
          class: 'wide',
          cell: (a) => timeEl(a.decided_at || a.expires_at),
        },
      ],
      null,
      status === 'pending' ? t('No request waits for approval.') : t('No request.'),
  );
  const apiQuery = {status: status === 'all' ? '' : status};
  const p = pager('/api/v1/approvals', apiQuery, 50);
  const pagerEl = pagedTable(
      tbl,
      {
        get done() {
          return p.done;
        },
        async next(signal) {
          const items = await p.next(signal);
          const found = await taskNames(items.map((a) => a.task_id), signal);
          for (const [k, v] of found) tasks.set(k, v);
          return items;
        },
      },
      {errors, signal: ctx.signal},
  );
  replace(
      ctx.main,
      pageHeader(t('Approvals')),
      errors,
      filters,
      h('p', {
        class: 'muted small',
        text: t(
            'A manual run of a task that requires approval waits here until someone holding the approver role approves it (the requester cannot) or it expires.'),
      }),
      tbl,
      pagerEl,
  );
  await pagerEl.ready;
}

async function renderApproval(ctx) {
  const id = ctx.params.id;
  const errors = errorBox();
  const [approval, names] = await Promise.all(
      [get(`/api/v1/approvals/${id}`, {}, ctx.signal), principalNames(ctx.signal)]);
  const tasks = await taskNames([approval.task_id], ctx.signal);
  ctx.title(t('Approval {id}', {id: shortId(id)}));
  const reload = () => ctx.navigate(`/approvals/${id}`, {t: Date.now()});
  const pending = approval.status === 'pending';
  const mine = approval.requester_id === session.who?.principal?.id;
  const runId = runOf(approval);

  // Approve: the request's approver role (the server also refuses the requester itself).
  const approve = pending ? actionButton(t('Approve'), approval.approver_role, async () => {
    await post(`/api/v1/approvals/${id}/approve`);
    reload();
  }, {errors, kind: 'primary'}) : null;
  // Reject with a reason: the approver role, or the requester withdrawing its own request.
  let reject = null;
  const rejectRole = allowed(approval.approver_role) ? approval.approver_role :
      mine && allowed('operator')                    ? 'operator' :
                                                       null;
  if (pending && rejectRole) {
    const reason = h('input', {
      id: 'reject-reason',
      required: true,
      maxlength: 512,
      autocomplete: 'off',
      placeholder: mine && rejectRole === 'operator' ? t('no longer needed') :
                                                       t('not during the freeze')
    });
    reject = inlineForm(
        'reject-form',
        [field(t('Reason'), reason, t('Recorded with the decision and in the audit.'))],
        rejectRole === 'operator' ? t('Withdraw') : t('Reject'), rejectRole, async () => {
          await post(`/api/v1/approvals/${id}/reject`, {reason: reason.value.trim()});
          reload();
        });
    reject.querySelector('button[type=submit]').className = 'btn danger';
  }

  // A listed request's `action` names it (run.create); the full answer's is the approved action
  // object (null until approved).
  const act = approval.action && typeof approval.action === 'object' ? approval.action : null;
  const d = approval.decision;
  const rc = approval.receipt;
  replace(
      ctx.main,
      h('div', {class: 'page-head'},
        h('h1', {}, tParts('Approval {id}', {id: h('span', {class: 'mono', text: shortId(id)})})),
        h('div', {class: 'actions'}, approve)),
      errors,
      runId ? h('div', {class: 'banner info', role: 'status', id: 'approval-run'},
                tParts('Approved: {run} started.', {
                  run: link(
                      t('run {id}', {id: shortId(runId)}), `/runs/${runId}`, {},
                      {class: 'run-link', title: runId}),
                })) :
              null,
      pending && !allowed(approval.approver_role) ?
          notice(
              t('Waiting for someone holding the {role} role to approve it.',
                {role: t(approval.approver_role)})) :
          null,
      pending && mine && allowed(approval.approver_role) ?
          notice(t('You requested this run: someone else must approve it.'), 'warn') :
          null,
      section(
          null,
          facts(
              [
                [t('Status'), h('span', {id: 'approval-status'}, badge(approval.status))],
                act ? [t('Action'), h('code', {text: act.action})] : null,
                [t('Task'), link(tasks.get(approval.task_id), `/tasks/${approval.task_id}`)],
                [t('Task revision'), String(approval.task_revision)],
                [t('Requested by'), principalText(names, approval.requester_id)],
                [t('Approver role'), t(approval.approver_role)],
                [t('Requested'), timeEl(approval.created_at)],
                [t('Expires'), timeEl(approval.expires_at)],
                [t('Decided'), timeEl(approval.decided_at)],
                [t('Priority'), String(approval.priority)],
                approval.idempotency_key ? [t('Idempotency key'), approval.idempotency_key] : null,
                [t('Payload digest'), h('code', {class: 'wrap', text: approval.payload_digest})],
                [t('Id'), h('code', {text: approval.id})],
              ],
              2),
          ),
      reject ? section(t('Reject'), reject) : null,
      d ? section(t('Decision'), facts([
                    [t('Decision'), badge(d.decision)],
                    [t('By'), principalText(names, d.decided_by)],
                    [t('Reason'), d.reason || '—'],
                    [t('At'), timeEl(d.decided_at)],
                  ])) :
          null,
      act ?
          section(t('Approved action'), facts([
                    [t('Action'), h('code', {text: act.action})],
                    [t('Status'), t(act.status)],
                    [t('Run'), act.run_id ? link(shortId(act.run_id), `/runs/${act.run_id}`) : '—'],
                    [t('Consumed'), timeEl(act.consumed_at)],
                  ])) :
          null,
      rc ? section(t('Receipt'), facts([
                     [t('Request'), h('code', {text: rc.request_id})],
                     [t('Decision'), h('code', {text: rc.decision_id})],
                     [t('Action'), h('code', {text: rc.action_id})],
                     [t('Run'), link(rc.run_id, `/runs/${rc.run_id}`, {}, {class: 'mono'})],
                     [t('At'), timeEl(rc.created_at)],
                   ])) :
           null,
  );
}
