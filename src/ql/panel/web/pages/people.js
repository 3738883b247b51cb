// Principals, tokens and installation roles: installation admins manage every principal and
// token; everyone sees and revokes their own tokens and can make new ones for themselves.

import {get, post} from '../lib/api.js';
import {h, randomId, replace} from '../lib/dom.js';
import {shortId, timeEl} from '../lib/format.js';
import {t} from '../lib/i18n.js';
import {session} from '../lib/session.js';
import {actionButton, allowed, badge, errorBox, field, inlineForm, notice, pageHeader, section, select, table} from '../lib/ui.js';

export const nav = {
  label: t('People & tokens'),
  path: '/people'
};
export const routes = [{pattern: '/people', render}];

const DAY_MS = 24 * 3600 * 1000;

async function render(ctx) {
  ctx.title(t('People & tokens'));
  const errors = errorBox();
  const admin = allowed('install');
  const reload = () => ctx.navigate('/people', {t: Date.now()});
  const [principals, tokens, installBindings, settings] = await Promise.all([
    admin ? get('/api/v1/principals', {}, ctx.signal) :
            Promise.resolve({items: [session.who.principal]}),
    get('/api/v1/tokens', {}, ctx.signal),
    admin ? get('/api/v1/installation/bindings', {}, ctx.signal) : Promise.resolve({items: []}),
    // Installation settings; a server without the route (404) has none to show.
    admin ? get('/api/v1/settings', {}, ctx.signal).catch((err) => {
      if (err.name === 'AbortError') throw err;
      return err.status === 404 ? null : {error: err};
    }) :
            Promise.resolve(null),
  ]);
  const names = new Map((principals.items || []).map((p) => [p.id, p.name]));
  const content = [pageHeader(t('People & tokens')), errors];

  if (admin) {
    const name = h(
        'input', {id: 'principal-name', required: true, placeholder: 'alice', autocomplete: 'off'});
    const kind =
        select([['user', t('user')], ['service', t('service')]], 'user', {id: 'principal-kind'});
    const form = inlineForm(
        'principal-form',
        [field(t('Name'), name, t('1–64 of A-Z a-z 0-9 . _ -')), field(t('Kind'), kind)],
        t('Add principal'), 'install', async () => {
          await post('/api/v1/principals', {name: name.value.trim(), kind: kind.value});
          reload();
        });
    content.push(
        section(
            t('Principals'),
            table(
                [
                  {label: t('Name'), cell: (p) => p.name},
                  {label: t('Kind'), cell: (p) => t(p.kind)},
                  {
                    label: t('Status'),
                    cell: (p) => badge(p.status === 'active' ? 'active' : 'disabled')
                  },
                  {label: t('Created'), class: 'wide', cell: (p) => timeEl(p.created_at)},
                  {
                    label: '',
                    class: 'row-actions',
                    cell: (p) => p.status === 'active' ?
                        actionButton(
                            t('Disable'), 'install',
                            async () =>
                                (await post(`/api/v1/principals/${p.id}/disable`), reload()),
                            {errors, confirm: t('Confirm disable')}) :
                        actionButton(
                            t('Enable'), 'install',
                            async () => (await post(`/api/v1/principals/${p.id}/enable`), reload()),
                            {errors}),
                  },
                ],
                principals.items || [],
                ),
            form,
            ),
    );
  }

  // Tokens.
  const shown = h('div', {id: 'new-token', 'aria-live': 'polite'});
  const owner = admin ? select(
                            (principals.items || [])
                                .filter((p) => p.status === 'active')
                                .map((p) => [p.name, p.name]),
                            session.who.principal.name, {id: 'token-principal'}) :
                        null;
  const days =
      h('input', {id: 'token-days', type: 'number', min: 1, step: 1, placeholder: t('never')});
  const tokenForm = inlineForm(
      'token-form',
      [
        owner ? field(t('For'), owner) : null,
        field(t('Expires after (days)'), days, t('Empty: never expires.'))
      ],
      t('Create token'), null, async () => {
        const body = {};
        if (owner) body.principal = owner.value;
        if (days.value) body.expires_in_ms = Math.round(Number(days.value) * DAY_MS);
        const minted = await post('/api/v1/tokens', body);
        const value =
            h('input', {id: 'token-value', readonly: true, class: 'mono', value: minted.token});
        replace(
            shown, notice(t('Copy this token now: it is shown once and never again.'), 'warn'),
            field(t('New token'), value));
        value.select();
      }, shown);
  content.push(
      section(
          admin ? t('Tokens') : t('Your tokens'),
          table(
              [
                {
                  label: t('Token'),
                  cell: (row) => h('code', {title: row.id, text: shortId(row.id)})
                },
                {
                  label: t('Principal'),
                  cell: (row) => names.get(row.principal_id) || shortId(row.principal_id)
                },
                {label: t('Created'), class: 'wide', cell: (row) => timeEl(row.created_at)},
                {label: t('Expires'), cell: (row) => timeEl(row.expires_at)},
                {label: t('Last used'), class: 'wide', cell: (row) => timeEl(row.last_used_at)},
                {
                  label: t('State'),
                  cell: (row) => (
                      row.revoked_at ?
                          badge('revoked') :
                          actionButton(
                              t('Revoke'), 'self',
                              async () => (await post(`/api/v1/tokens/${row.id}/revoke`), reload()),
                              {errors, confirm: t('Confirm revoke')})),
                },
              ],
              tokens.items || [],
              t('No token.'),
              ),
          tokenForm,
          ),
  );

  if (admin) {
    const who =
        h('input',
          {id: 'install-principal', required: true, autocomplete: 'off', placeholder: 'alice'});
    const role = select(
        (session.who.installation_role === 'owner' ? ['admin', 'owner', 'none'] : ['admin', 'none'])
            .map((r) => [r, t(r)]),
        'admin', {id: 'install-role'});
    const form = inlineForm(
        'install-form', [field(t('Principal'), who), field(t('Role'), role, t('none revokes'))],
        t('Set installation role'), 'install', async () => {
          await post(
              '/api/v1/installation/bindings',
              {principal: who.value.trim(), role: role.value, mutation_id: randomId()});
          reload();
        });
    content.push(
        section(
            t('Installation roles'),
            h('p', {
              class: 'muted small',
              text: t(
                  'An installation owner or admin holds that role in every project and manages principals, tokens, projects and the audit.')
            }),
            table(
                [
                  {label: t('Principal'), cell: (b) => b.principal},
                  {label: t('Role'), cell: (b) => t(b.role)},
                  {label: t('Since'), cell: (b) => timeEl(b.created_at)},
                ],
                installBindings.items || [],
                ),
            form,
            ),
    );
  }
  if (settings) content.push(signInPolicy(settings));
  replace(ctx.main, ...content);
}

const SECOND_FACTOR_CHOICES = [
  ['off', t('No one')],
  ['admins', t('Installation owners and admins')],
  ['everyone', t('Everyone')],
];

// The installation's sign-in policy (GET/POST /api/v1/settings): who must have a second factor.
function signInPolicy(settings) {
  const saved = h('div', {id: 'settings-saved', 'aria-live': 'polite'});
  const errors = errorBox();
  if (settings.error) errors.show(settings.error);
  const required = select(
      SECOND_FACTOR_CHOICES, settings.require_second_factor || 'off',
      {id: 'require-second-factor'});
  const form = inlineForm(
      'settings-form',
      [
        field(
            t('Require a second factor'), required,
            t('No one: each person chooses. Someone who must have one and has none can do nothing but set it up after signing in.'))
      ],
      t('Save'), 'install', async () => {
        const now = await post('/api/v1/settings', {require_second_factor: required.value});
        required.value = now.require_second_factor || required.value;
        const chosen = SECOND_FACTOR_CHOICES.find(([v]) => v === required.value);
        const whom = chosen ? chosen[1].toLowerCase() : required.value;
        replace(saved, notice(t('Saved: a second factor is now required of {whom}.', {whom})));
      });
  return section(t('Sign-in policy'), errors, saved, settings.error ? null : form);
}
