// Workers and pools (installation admins, ql-cluster): every worker with its state, pool,
// labels, runs against slots, version and last heartbeat, drained and resumed here; and the
// pools: open to every project or to the projects granted (each with its limit and weight),
// the pool's own limit, live workers and runs, with grant, revoke, open, close and the limit.
// ql-local answers 503 workers_unavailable: it runs every task itself, which the page says.

import {get, post} from '../lib/api.js';
import {h, replace} from '../lib/dom.js';
import {timeEl} from '../lib/format.js';
import {t} from '../lib/i18n.js';
import {actionButton, allowed, badge, errorBox, field, inlineForm, notice, pageHeader, section, select, table} from '../lib/ui.js';

export const nav = {
  label: t('Workers'),
  path: '/workers',
  visible: (s) => s.installationAdmin()
};
export const routes = [{pattern: '/workers', render}];

const workerApi = (name) => `/api/v1/workers/${encodeURIComponent(name)}`;
const poolApi = (name) => `/api/v1/pools/${encodeURIComponent(name)}`;

// Returns labels ({key: value}) as chips, or a dash.
function labelChips(labels) {
  const entries = Object.entries(labels || {}).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  if (!entries.length) return h('span', {class: 'muted', text: '—'});
  return h(
      'span', {class: 'labels'},
      entries.map(([k, v]) => h('span', {class: 'chip', text: `${k}=${v}`})));
}

// Returns a count from the server as text, or a dash when the answer lacks it.
function count(n) {
  return typeof n === 'number' ? String(n) : '—';
}

// Returns "limit N" or "no limit" for a max_running.
function limitText(max) {
  return max === null || max === undefined ? t('no limit') : t('at most {n} running', {n: max});
}

async function render(ctx) {
  ctx.title(t('Workers'));
  const errors = errorBox();
  const done = h('div', {id: 'workers-saved', 'aria-live': 'polite'});
  const head = pageHeader(t('Workers'));
  let answers;
  try {
    answers = await Promise.all([
      get('/api/v1/workers', {}, ctx.signal),
      get('/api/v1/pools', {}, ctx.signal),
      get('/api/v1/projects', {}, ctx.signal),
    ]);
  } catch (err) {
    if (err.name === 'AbortError') throw err;
    if (err.code === 'workers_unavailable') {
      replace(
          ctx.main, head,
          h('div', {id: 'workers-local', class: 'banner info', role: 'status'},
            h('strong', {text: t('This server runs every task itself.')}), h('div', {
              text: t(
                  'It has no remote workers and no pools: there is nothing to manage here. Workers belong to a cluster (ql-cluster serve), where each ql-worker registers and takes runs from its pool.')
            })));
      return;
    }
    throw err;
  }
  const projects = answers[2].items || [];
  const projectName = (id) => projects.find((p) => p.id === id)?.slug || id.slice(0, 8);
  let workers = answers[0].items || [];
  let pools = answers[1].items || [];

  const reload = async () => {
    [workers, pools] = (await Promise.all([
                         get('/api/v1/workers', {}, ctx.signal),
                         get('/api/v1/pools', {}, ctx.signal),
                       ])).map((a) => a.items || []);
    paint();
  };
  const act = (message, run) => async () => {
    await run();
    replace(done, notice(message));
    await reload();
  };

  const workerTable =
      table(
          [
            {
              label: t('Name'),
              cell: (w) => h('code', {class: 'worker-name', title: w.id, text: w.name})
            },
            {label: t('State'), cell: (w) => h('span', {class: 'worker-state'}, badge(w.state))},
            {label: t('Pool'), cell: (w) => (w.pool ? h('code', {text: w.pool}) : '—')},
            {label: t('Labels'), cell: (w) => labelChips(w.labels)},
            {
              label: t('Running / slots'),
              class: 'num',
              cell: (w) =>
                  h('span', {title: (w.running_runs || []).join('\n')},
                    `${count(w.running)} / ${count(w.slots)}`),
            },
            {label: t('Version'), class: 'wide', cell: (w) => w.version || '—'},
            {label: t('Last seen'), cell: (w) => timeEl(w.last_seen)},
            {
              label: '',
              class: 'row-actions',
              cell: (w) => w.revoked ? null :
                  w.drained          ? actionButton(
                                           t('Resume'), 'install',
                                           act(t('Worker {name} takes runs again.', {name: w.name}),
                                               () => post(`${workerApi(w.name)}/resume`)),
                                           {errors, confirm: t('Confirm resume')}) :
                                       actionButton(
                                           t('Drain'), 'install',
                                           act(t('Worker {name} is drained: it takes no new run; the runs it holds finish.',
                                                 {name: w.name}),
                                               () => post(`${workerApi(w.name)}/drain`)),
                                           {errors, confirm: t('Confirm drain')}),
                     },
          ],
          null, t('No worker has registered yet.'));
  workerTable.id = 'workers-table';
  workerTable.classList.add('fleet-table');

  const grantsCell = (p) => {
    if (p.serves_all_projects) {
      return h('span', {class: 'pool-open'}, badge('open'), ' ', t('every project'));
    }
    if (!p.grants.length) return h('span', {class: 'muted', text: t('no project')});
    return h(
        'ul', {class: 'plain grants'},
        p.grants.map(
            (g) =>
                h('li', {dataset: {project: projectName(g.project_id)}},
                  h('code', {text: projectName(g.project_id)}), ' ', h('span', {
                    class: 'muted small',
                    text:
                        t('{limit}, weight {weight}',
                          {limit: limitText(g.max_running), weight: g.weight})
                  }),
                  ' ',
                  actionButton(
                      t('Revoke'), 'install',
                      act(t('Pool {pool} no longer runs project {project}.',
                            {pool: p.name, project: projectName(g.project_id)}),
                          () => post(`${poolApi(p.name)}/revoke`, {project: g.project_id})),
                      {errors, kind: 'danger', confirm: t('Confirm revoke')}))));
  };
  const poolTable =
      table(
          [
            {
              label: t('Pool'),
              cell: (p) => h(
                  'span', {}, h('code', {class: 'pool-name', text: p.name}),
                  p.configured ?
                      null :
                      [' ', h('span', {class: 'muted small', text: t('(only named by workers)')})]),
            },
            {label: t('Projects'), cell: grantsCell},
            {label: t('Limit'), cell: (p) => limitText(p.max_running)},
            {label: t('Live workers'), class: 'num', cell: (p) => count(p.live_workers)},
            {label: t('Running'), class: 'num', cell: (p) => count(p.running)},
            {
              label: '',
              class: 'row-actions',
              cell: (p) => p.serves_all_projects ?
                  actionButton(
                      t('Close'), 'install',
                      act(t('Pool {pool} now runs only the projects granted.', {pool: p.name}),
                          () => post(poolApi(p.name), {serves_all_projects: false})),
                      {errors, confirm: t('Confirm close')}) :
                  actionButton(
                      t('Open to every project'), 'install',
                      act(t('Pool {pool} now runs every project.', {pool: p.name}),
                          () => post(poolApi(p.name), {serves_all_projects: true})),
                      {errors, confirm: t('Confirm open')}),
            },
          ],
          null, t('No pool yet.'));
  poolTable.id = 'pools-table';
  poolTable.classList.add('fleet-table');

  const paint = () => {
    workerTable.setRows(workers);
    poolTable.setRows(pools);
    poolNames.replaceChildren(...pools.map((p) => h('option', {value: p.name})));
  };

  // Grant a project, and the pool's own limit.
  const poolNames = h('datalist', {id: 'pool-names'});
  const grantPool = h('input', {
    id: 'grant-pool',
    required: true,
    list: 'pool-names',
    autocomplete: 'off',
    spellcheck: 'false',
    class: 'mono',
    placeholder: 'default'
  });
  const grantProject = select(
      projects.filter((p) => p.status !== 'archived').map((p) => [p.slug, `${p.slug} — ${p.name}`]),
      projects[0]?.slug, {id: 'grant-project'});
  const grantMax =
      h('input', {id: 'grant-max', type: 'number', min: 1, step: 1, placeholder: t('no limit')});
  const grantWeight =
      h('input', {id: 'grant-weight', type: 'number', min: 1, step: 1, placeholder: '1'});
  const grantForm = inlineForm(
      'grant-form',
      [
        field(
            t('Pool'), grantPool,
            t('A pool no one configured yet is made, serving its grants only.')),
        field(t('Project'), grantProject),
        field(
            t('At most running'), grantMax,
            t('Runs of the project in the pool at once; empty: no limit.')),
        field(
            t('Weight'), grantWeight,
            t('Its share when projects wait for the same workers; 1 by default.')),
      ],
      t('Grant'), 'install', act(t('Granted.'), async () => {
        const body = {project: grantProject.value};
        if (grantMax.value) body.max_running = Number(grantMax.value);
        if (grantWeight.value) body.weight = Number(grantWeight.value);
        await post(`${poolApi(grantPool.value.trim())}/grants`, body);
        grantMax.value = '';
        grantWeight.value = '';
      }));
  const limitPool = h('input', {
    id: 'limit-pool',
    required: true,
    list: 'pool-names',
    autocomplete: 'off',
    spellcheck: 'false',
    class: 'mono',
    placeholder: 'default'
  });
  const limitMax =
      h('input', {id: 'limit-max', type: 'number', min: 1, step: 1, placeholder: t('no limit')});
  const limitForm = inlineForm(
      'limit-form',
      [
        field(t('Pool'), limitPool),
        field(
            t('At most running'), limitMax,
            t('Runs in the pool at once, every project together; empty: no limit.')),
      ],
      t('Set the limit'), 'install', act(t('Limit saved.'), async () => {
        await post(
            poolApi(limitPool.value.trim()),
            {max_running: limitMax.value ? Number(limitMax.value) : null});
      }));

  replace(
      ctx.main, head, errors, done,
      section(
          null, h('p', {
            class: 'muted small',
            text: t(
                'Drain stops a worker from taking new runs (the runs it holds finish); Resume lets it take runs again. Labels and the pool are what the worker registered with.')
          }),
          workerTable),
      section(
          t('Pools'), h('p', {
            class: 'muted small',
            text: t(
                'A run goes to a worker of its pool whose labels it asks for. A pool runs the projects granted to it, or every project once opened.')
          }),
          poolTable, poolNames,
          allowed('install') ?
              [
                h('h3', {class: 'form-title', text: t('Grant a project')}), grantForm,
                h('h3', {class: 'form-title', text: t('Pool limit')}), limitForm
              ] :
              null));
  paint();

  // The states change by themselves (heartbeats, runs): read again every 5 s, except while a
  // confirming click is armed (repainting would disarm it).
  ctx.every(5000, async () => {
    if (ctx.main.querySelector('.btn.armed')) return;
    try {
      await reload();
    } catch (err) {
      if (err.name !== 'AbortError') errors.show(err);
    }
  });
}
