// Secrets: the project's secrets by name (current version, status, times; never a value: no
// answer holds one), setting a value as the next version, and deleting (admins). The value is
// typed into a password field that is emptied once the request is sent, and is never shown.

import {del, get, put} from '../lib/api.js';
import {h, replace} from '../lib/dom.js';
import {timeEl} from '../lib/format.js';
import {t} from '../lib/i18n.js';
import {actionButton, allowed, badge, errorBox, field, inlineForm, notice, pageHeader, section, table} from '../lib/ui.js';

export const nav = {
  label: t('Secrets'),
  path: '/secrets'
};
export const routes = [{pattern: '/secrets', render}];

async function render(ctx) {
  ctx.title(t('Secrets'));
  const errors = errorBox();
  const saved = h('div', {id: 'secret-saved', 'aria-live': 'polite'});
  const name = h('input', {
    id: 'secret-name',
    required: true,
    maxlength: 128,
    autocomplete: 'off',
    spellcheck: 'false',
    class: 'mono',
    placeholder: t('github-token')
  });
  const value = h('input', {
    id: 'secret-value',
    type: 'password',
    required: true,
    autocomplete: 'new-password',
    spellcheck: 'false'
  });
  const path = (n) => `/api/v1/secrets/${encodeURIComponent(n)}`;
  const tbl = table(
      [
        {label: t('Name'), cell: (s) => h('code', {class: 'secret-name', text: s.name})},
        {label: t('Version'), class: 'num', cell: (s) => String(s.current_version)},
        {label: t('Status'), cell: (s) => badge(s.status)},
        {label: t('Created'), class: 'wide', cell: (s) => timeEl(s.created_at)},
        {label: t('Updated'), cell: (s) => timeEl(s.updated_at)},
        {label: t('Deleted'), class: 'wide', cell: (s) => timeEl(s.deleted_at)},
        {
          label: '',
          class: 'row-actions',
          cell: (s) =>
              [actionButton(
                   t('New value'), 'admin',
                   async () => {
                     name.value = s.name;
                     value.focus();
                   }),
               s.status === 'deleted' ? null :
                                        actionButton(
                                            t('Delete'), 'admin',
                                            async () => {
                                              await del(path(s.name));
                                              replace(
                                                  saved,
                                                  notice(
                                                      t('Secret {name} deleted.', {name: s.name})));
                                              await load();
                                            },
                                            {errors, kind: 'danger', confirm: t('Confirm delete')}),
  ],
        },
      ],
      null,
      t('No secret yet.'),
  );
  const load = async () => {
    const list = await get('/api/v1/secrets', {}, ctx.signal);
    tbl.setRows(list.items || []);
  };
  let form = null;
  if (allowed('admin')) {
    form = inlineForm(
        'secret-form',
        [
          field(
              t('Name'), name,
              t('Letters, digits, _ . - (at most 128), starting with a letter or _.')),
          field(t('Value'), value, t('Stored sealed as the next version; never shown again.')),
        ],
        t('Save value'), 'admin', async () => {
          const text = value.value;
          // The field is emptied as soon as the value is on its way, whatever the answer.
          value.value = '';
          const s = await put(path(name.value.trim()), {value: text});
          replace(
              saved,
              notice(
                  t('Secret {name} is at version {version}.',
                    {name: s.name, version: s.current_version})));
          name.value = '';
          await load();
        });
  }
  replace(
      ctx.main,
      pageHeader(t('Secrets')),
      errors,
      saved,
      h('p', {
        class: 'muted small',
        text: t(
            'A task names a secret in its secret environment; the value is opened only when an attempt starts and is masked in its log. Deleting destroys every version\'s key: runs that need it then fail with secret_not_found.'),
      }),
      section(null, tbl),
      form ? section(t('Set a value'), form) : null,
  );
  try {
    await load();
  } catch (err) {
    if (err.name === 'AbortError') throw err;
    errors.show(err);
    tbl.setFailed();
  }
}
