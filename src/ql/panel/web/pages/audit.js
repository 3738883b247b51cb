// The security audit (installation admins): governance changes, refusals and failed
// sign-ins, newest first, paged by the API's cursor.

import {pager} from '../lib/api.js';
import {h, replace} from '../lib/dom.js';
import {shortId, timeEl} from '../lib/format.js';
import {t} from '../lib/i18n.js';
import {principalNames} from '../lib/lookup.js';
import {badge, errorBox, pagedTable, pageHeader, table} from '../lib/ui.js';

export const nav = {
  label: t('Audit'),
  path: '/audit',
  visible: (s) => s.installationAdmin()
};
export const routes = [{pattern: '/audit', render}];

async function render(ctx) {
  ctx.title(t('Audit'));
  const errors = errorBox();
  const names = await principalNames(ctx.signal);
  const id = (v) => (v ? h('code', {title: v, text: names.get(v) || shortId(v)}) : '—');
  const tbl = table(
      [
        {label: t('At'), cell: (a) => timeEl(a.at)},
        {label: t('Action'), cell: (a) => h('code', {text: a.action})},
        {label: t('Outcome'), cell: (a) => badge(a.outcome)},
        {label: t('Code'), cell: (a) => a.code || '—'},
        {label: t('Actor'), cell: (a) => id(a.actor_id)},
        {
          label: t('Target'),
          class: 'wide',
          cell: (a) => (a.target_kind ? h('span', {}, `${a.target_kind} `, id(a.target_id)) : '—')
        },
        {label: t('Project'), class: 'wide', cell: (a) => id(a.project_id)},
        {label: t('Request'), class: 'wide', cell: (a) => a.request_id || '—'},
      ],
      null,
      t('No fact recorded.'),
  );
  const pagerEl = pagedTable(tbl, pager('/api/v1/audit', {}, 50), {errors, signal: ctx.signal});
  replace(ctx.main, pageHeader(t('Audit')), errors, tbl, pagerEl);
  await pagerEl.ready;
}
