// Triggers: the list, one trigger with the next fire times the scheduler will admit, and the
// form that creates one with a live preview of its next 5 fire times in its own zone.

import {get, pager, post} from '../lib/api.js';
import {cronWords} from '../lib/cron.js';
import {debounce, h, randomId, replace} from '../lib/dom.js';
import {offsetOf, shortId, timeEl, timeText, viewerZone} from '../lib/format.js';
import {t, tParts} from '../lib/i18n.js';
import {taskNames} from '../lib/lookup.js';
import {session} from '../lib/session.js';
import {actionButton, actionLink, badge, errorBox, facts, field, href, link, notice, onSubmit, pagedTable, pageHeader, section, select, table} from '../lib/ui.js';

export const nav = {
  label: t('Triggers'),
  path: '/triggers'
};
export const routes = [
  {pattern: '/triggers', render: renderList},
  {pattern: '/triggers/new', render: renderForm},
  {pattern: '/triggers/:id', render: renderTrigger},
];

export const DST_RULE = t(
    'Daylight saving: a wall time skipped when clocks spring forward fires once, at the first instant after the gap; a wall time that occurs twice when clocks fall back fires once, at its first occurrence — unless the hour field is *, then both passes fire.');

const MISFIRE = [
  ['skip', t('skip — an occurrence later than the grace is skipped')],
  ['fire_once', t('fire_once — the oldest missed occurrence runs once')],
];

// What admission does with an occurrence while an earlier run of the same trigger is unfinished.
export const OVERLAP = [
  ['allow', t('every occurrence starts its own run, even while earlier ones go on')],
  ['forbid', t('the occurrence is not run: it is recorded as a skipped run (reason overlap)')],
  ['replace', t('the unfinished runs are cancelled (reason replaced), then the occurrence runs')],
];

// Returns a trigger's overlap policy in words.
export function overlapText(policy) {
  const p = policy || 'allow';
  const line = OVERLAP.find(([v]) => v === p);
  return line ? `${p} — ${line[1]}` : p;
}

// Returns the buttons that change a trigger, for the caller's role.
function triggerActions(trigger, errors, onChange) {
  const change = (verb) => async () => {
    await post(`/api/v1/triggers/${trigger.id}/${verb}`);
    onChange();
  };
  return [
    trigger.enabled ? actionButton(t('Disable'), 'operator', change('disable'), {errors}) :
                      actionButton(t('Enable'), 'operator', change('enable'), {errors}),
    trigger.pin_stale ? actionButton(t('Repin'), 'admin', change('repin'), {errors}) : null,
  ];
}

// Returns a table of triggers with their actions; `names` maps task ids to names.
export function triggerTable(rows, {errors, onChange, names = new Map(), showTask = true}) {
  return table(
      [
        {
          label: t('Schedule'),
          cell: (row) =>
              [link(row.expression, `/triggers/${row.id}`, {}, {class: 'mono trigger-link'}),
               cronWords(row.expression) ?
                   h('div', {class: 'muted small', text: cronWords(row.expression)}) :
                   null],
        },
        {label: t('Zone'), class: 'wide', cell: (row) => row.timezone},
        showTask ? {
          label: t('Task'),
          cell: (row) =>
              link(names.get(row.task_id) || shortId(row.task_id), `/tasks/${row.task_id}`)
        } :
                   null,
        {label: t('State'), cell: (row) => badge(row.state)},
        {label: t('Next fire'), cell: (row) => timeEl(row.next_fire_at, row.timezone)},
        {label: t('Misfire'), class: 'wide', cell: (row) => row.misfire},
        {label: t('Overlap'), class: 'wide', cell: (row) => row.overlap || 'allow'},
        {label: '', class: 'row-actions', cell: (row) => triggerActions(row, errors, onChange)},
      ].filter(Boolean),
      rows,
      t('No trigger.'),
  );
}

async function renderList(ctx) {
  ctx.title(t('Triggers'));
  const errors = errorBox();
  const task = ctx.query.task || '';
  const p = pager('/api/v1/triggers', {task_id: task}, 50);
  const names = new Map();
  const tbl = triggerTable(
      null, {errors, onChange: () => ctx.navigate('/triggers', {task, t: Date.now()}), names});
  const pagerEl = pagedTable(
      tbl, {
        get done() {
          return p.done;
        },
        async next(signal) {
          const items = await p.next(signal);
          for (const [k, v] of await taskNames(items.map((row) => row.task_id), signal))
            names.set(k, v);
          return items;
        },
      },
      {errors, signal: ctx.signal});
  replace(
      ctx.main,
      pageHeader(
          t('Triggers'), actionLink(t('New trigger'), 'admin', href('/triggers/new', {task}))),
      errors,
      task ? notice(t('Only the triggers of task {id}.', {id: shortId(task)})) : null,
      tbl,
      pagerEl,
  );
  await pagerEl.ready;
}

// Returns a list of fire times: the trigger zone's wall time (from the server) and the viewer's.
function fireList(times, zone) {
  if (!times.length) return h('p', {class: 'muted', text: t('No fire time.')});
  let lastOffset = null;
  return h(
      'ol',
      {class: 'fire-times'},
      times.map((f) => {
        const offset = offsetOf(f.local);
        const changed = lastOffset !== null && offset !== lastOffset;
        lastOffset = offset;
        return h(
            'li',
            {},
            h('span', {class: 'mono local'}, f.local.replace('T', ' ')),
            h('span', {class: 'zone', text: ` ${zone}`}),
            changed ?
                h('span', {class: 'badge warn', text: t('UTC offset now {offset}', {offset})}) :
                null,
            zone !== viewerZone ? h('span', {class: 'viewer muted', text: ` = ${timeText(f.at)}`}) :
                                  null,
        );
      }),
  );
}

async function renderTrigger(ctx) {
  const id = ctx.params.id;
  const errors = errorBox();
  const [trig, next] = await Promise.all([
    get(`/api/v1/triggers/${id}`, {}, ctx.signal),
    get(`/api/v1/triggers/${id}/next`, {count: 5}, ctx.signal)
  ]);
  const names = await taskNames([trig.task_id], ctx.signal);
  ctx.title(t('Trigger {expression}', {expression: trig.expression}));
  const reload = () => ctx.navigate(`/triggers/${id}`, {t: Date.now()});
  replace(
      ctx.main,
      pageHeader(
          t('Trigger {expression}', {expression: trig.expression}),
          triggerActions(trig, errors, reload),
          actionLink(
              t('Change schedule…'), 'admin',
              href('/triggers/new', {task: trig.task_id, replace: trig.id})),
          ),
      errors,
      section(
          null,
          facts(
              [
                [t('Task'), link(names.get(trig.task_id), `/tasks/${trig.task_id}`)],
                [t('Expression'), h('code', {text: trig.expression})],
                cronWords(trig.expression) ? [t('Schedule'), cronWords(trig.expression)] : null,
                [t('Time zone'), trig.timezone],
                [t('State'), badge(trig.state)],
                [t('Misfire'), trig.misfire],
                [
                  t('Overlap'),
                  h('span', {id: 'trigger-overlap-policy', text: overlapText(trig.overlap)})
                ],
                [
                  t('Jitter'), h('span', {
                    id: 'trigger-jitter',
                    text: trig.jitter_ms ? t('each run starts up to {n} s after its occurrence',
                                             {n: trig.jitter_ms / 1000}) :
                                           t('none')
                  })
                ],
                [
                  t('Pinned to'),
                  t('task revision {revision}', {revision: trig.task_revision}) +
                      (trig.pin_stale ? t(' (stale: the task changed since)') : '')
                ],
                [t('Last scheduled'), timeEl(trig.last_scheduled_at, trig.timezone)],
                [
                  t('Revision'), h('span', {}, tParts('{revision}, published {at}', {
                                     revision: String(trig.revision),
                                     at: timeEl(trig.revision_created_at)
                                   }))
                ],
                [t('Id'), h('code', {text: trig.id})],
              ],
              2),
          ),
      section(
          t('Next 5 occurrences'),
          next.admitting ?
              null :
              notice(
                  t('This trigger is not active: these times are computed, but nothing will run.'),
                  'warn'),
          fireList(next.fire_times || [], trig.timezone),
          h('p', {class: 'muted small', text: DST_RULE}),
          ),
      section(t('Runs'), link(t('Runs of this trigger'), '/runs', {trigger: trig.id})),
  );
}

async function renderForm(ctx) {
  if (!session.can('admin')) {
    replace(
        ctx.main, pageHeader(t('New trigger')),
        notice(
            t('Publishing triggers needs the admin role; yours here is {role}.',
              {role: t(session.role())}),
            'warn'));
    return;
  }
  const replacing =
      ctx.query.replace ? await get(`/api/v1/triggers/${ctx.query.replace}`, {}, ctx.signal) : null;
  ctx.title(replacing ? t('Change schedule') : t('New trigger'));
  const errors = errorBox();
  const tasks = (await get('/api/v1/tasks', {limit: 500}, ctx.signal)).items || [];
  const chosen = ctx.query.task || replacing?.task_id || tasks[0]?.id || '';
  const taskSelect = select(
      tasks.map(
          (row) => [row.id, row.enabled ? row.name : t('{name} (disabled)', {name: row.name})]),
      chosen,
      {id: 'trigger-task', required: true, disabled: !!replacing},
  );
  const expression = h('input', {
    id: 'trigger-expression',
    class: 'mono',
    required: true,
    spellcheck: 'false',
    autocomplete: 'off',
    value: replacing?.expression || '',
    placeholder: t('*/5 * * * * *  or  30 2 * * *')
  });
  const zones =
      h('datalist', {id: 'zones'},
        (Intl.supportedValuesOf ? Intl.supportedValuesOf('timeZone') : [])
            .map((z) => h('option', {value: z})));
  const zone = h('input', {
    id: 'trigger-zone',
    list: 'zones',
    required: true,
    spellcheck: 'false',
    autocomplete: 'off',
    value: replacing?.timezone || viewerZone
  });
  const misfire = select(MISFIRE, replacing?.misfire || 'skip', {id: 'trigger-misfire'});
  const overlap =
      select(OVERLAP.map(([v]) => v), replacing?.overlap || 'allow', {id: 'trigger-overlap'});
  const overlapChoices =
      h('ul', {class: 'choices small', id: 'trigger-overlap-choices'},
        OVERLAP.map(([v, text]) => h('li', {}, h('code', {text: v}), ` ${text}`)));
  const markOverlap = () => {
    for (const li of overlapChoices.children)
      li.classList.toggle('chosen', li.firstChild.textContent === overlap.value);
  };
  overlap.addEventListener('change', markOverlap);
  markOverlap();
  const overlapField = field(
      t('Overlap policy'), overlap,
      t('When an occurrence comes due while an earlier run of this trigger is unfinished:'));
  overlapField.append(overlapChoices);
  overlap.setAttribute(
      'aria-describedby', `${overlap.getAttribute('aria-describedby')} ${overlapChoices.id}`);
  const jitter = h('input', {
    id: 'trigger-jitter-seconds',
    type: 'number',
    min: '0',
    max: '3600',
    step: '1',
    value: String((replacing?.jitter_ms || 0) / 1000)
  });
  const jitterMs = () => Math.round(Number(jitter.value || 0) * 1000);
  const enabled = h('input', {type: 'checkbox', id: 'trigger-enabled', checked: true});
  const preview =
      h('div', {id: 'preview', class: 'preview', 'aria-live': 'polite'},
        h('p', {class: 'muted', text: t('Type an expression to see its next 5 fire times.')}));

  let seq = 0;
  const refreshPreview = async () => {
    const mine = ++seq;
    if (!expression.value.trim()) {
      replace(
          preview,
          h('p', {class: 'muted', text: t('Type an expression to see its next 5 fire times.')}));
      return;
    }
    try {
      const out = await get(
          '/api/v1/cron/next',
          {expression: expression.value.trim(), timezone: zone.value.trim(), count: 5}, ctx.signal);
      if (mine !== seq) return;
      const words = cronWords(expression.value.trim());
      replace(
          preview, words ? h('p', {id: 'preview-words', text: words}) : null, h('p', {
            class: 'small',
            text: t('Next 5 fire times in {zone} (your time after "=")', {zone: out.timezone})
          }),
          fireList(out.fire_times || [], out.timezone));
    } catch (err) {
      if (mine !== seq || err.name === 'AbortError') return;
      const box = errorBox();
      box.id = 'preview-error';
      box.show(err);
      replace(preview, box);
    }
  };
  const later = debounce(refreshPreview, 250);
  expression.addEventListener('input', () => errors.clear());
  expression.addEventListener('input', later);
  zone.addEventListener('input', later);
  zone.addEventListener('change', later);

  const submit = h('button', {
    type: 'submit',
    class: 'btn primary',
    id: 'trigger-save',
    text: replacing ? t('Save new revision') : t('Create trigger')
  });
  const mutationId = randomId();
  const form = h(
      'form',
      {class: 'card form split', id: 'trigger-form', novalidate: true},
      h(
          'div',
          {class: 'split-main'},
          replacing ?
              notice(
                  t('Saving publishes the next revision of this trigger (same id, same task pin, enabled as it is); its schedule follows the new expression from the moment you save.'),
                  'info') :
              null,
          errors,
          field(t('Task'), taskSelect),
          field(
              t('Cron expression'), expression,
              t('Five fields (minute hour day-of-month month day-of-week) or six with seconds first. Lists, ranges, steps, JAN–DEC, SUN–SAT; no @macros.')),
          field(
              t('Time zone'), zone,
              t('An IANA name, e.g. Asia/Shanghai. The schedule follows wall-clock time there.')),
          zones,
          field(
              t('Misfire policy'), misfire,
              t('What happens to an occurrence the scheduler sees late (after a stop).')),
          overlapField,
          field(
              t('Jitter (seconds)'), jitter,
              t('Spread the runs: each occurrence is admitted on time, but its run starts up to this many seconds later, by an offset fixed per trigger and occurrence. 0 for none, at most 3600.')),
          replacing ? null :
                      h('div', {class: 'field check'}, enabled,
                        h('label',
                          { for: enabled.id, text: t('Enabled')
                          })),
          h('div', {class: 'actions'}, submit, h('a', {
              class: 'btn subtle',
              href: replacing ? href(`/triggers/${replacing.id}`) : href('/triggers'),
              text: t('Cancel')
            })),
          ),
      h('aside', {class: 'split-side', 'aria-label': t('Preview')}, h('h2', {text: t('Preview')}),
        preview, h('p', {class: 'muted small', text: DST_RULE})),
  );
  onSubmit(form, errors, async () => {
    if (replacing) {
      const edited = await post(`/api/v1/triggers/${replacing.id}/revisions`, {
        expected_revision: replacing.revision,
        expression: expression.value.trim(),
        timezone: zone.value.trim(),
        misfire: misfire.value,
        overlap: overlap.value,
        jitter_ms: jitterMs(),
      });
      ctx.navigate(`/triggers/${edited.id}`);
      return;
    }
    const created = await post('/api/v1/triggers', {
      task_id: taskSelect.value,
      expression: expression.value.trim(),
      timezone: zone.value.trim(),
      misfire: misfire.value,
      overlap: overlap.value,
      jitter_ms: jitterMs(),
      enabled: enabled.checked,
      mutation_id: mutationId,
    });
    ctx.navigate(`/triggers/${created.id}`);
  });
  replace(
      ctx.main,
      pageHeader(
          replacing ? t('Change schedule of {expression}', {expression: replacing.expression}) :
                      t('New trigger')),
      form);
  if (!tasks.length) form.prepend(notice(t('Create a task first: a trigger runs a task.'), 'warn'));
  if (expression.value) refreshPreview();
  expression.focus();
}
