// Principals, tokens and installation roles: installation admins manage every principal and
// token; everyone sees and revokes their own tokens and can make new ones for themselves.

import {get, post} from '../lib/api.js';
import {h, randomId, replace} from '../lib/dom.js';
import {shortId, timeEl} from '../lib/format.js';
import {session} from '../lib/session.js';
import {actionButton, allowed, badge, errorBox, field, inlineForm, notice, pageHeader, section, select, table} from '../lib/ui.js';

export const nav = {
  label: 'People & tokens',
  path: '/people'
};
export const routes = [{pattern: '/people', render}];

const DAY_MS = 24 * 3600 * 1000;

async function render(ctx) {
  ctx.title('People & tokens');
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
  const content = [pageHeader('People & tokens'), errors];

  if (admin) {
    const name = h(
        'input', {id: 'principal-name', required: true, placeholder: 'alice', autocomplete: 'off'});
    const kind = select(['user', 'service'], 'user', {id: 'principal-kind'});
    const form = inlineForm(
        'principal-form', [field('Name', name, '1–64 of A-Z a-z 0-9 . _ -'), field('Kind', kind)],
        'Add principal', 'install', async () => {
          await post('/api/v1/principals', {name: name.value.trim(), kind: kind.value});
          reload();
        });
    content.push(
        section(
            'Principals',
            table(
                [
                  {label: 'Name', cell: (p) => p.name},
                  {label: 'Kind', cell: (p) => p.kind},
                  {
                    label: 'Status',
                    cell: (p) => badge(p.status === 'active' ? 'active' : 'disabled')
                  },
                  {label: 'Created', class: 'wide', cell: (p) => timeEl(p.created_at)},
                  {
                    label: '',
                    class: 'row-actions',
                    cell: (p) => p.status === 'active' ?
                        actionButton(
                            'Disable', 'install',
                            async () =>
                                (await post(`/api/v1/principals/${p.id}/disable`), reload()),
                            {errors, confirm: 'Confirm disable'}) :
                        actionButton(
                            'Enable', 'install',
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
      h('input', {id: 'token-days', type: 'number', min: 1, step: 1, placeholder: 'never'});
  const tokenForm = inlineForm(
      'token-form',
      [
        owner ? field('For', owner) : null,
        field('Expires after (days)', days, 'Empty: never expires.')
      ],
      'Create token', null, async () => {
        const body = {};
        if (owner) body.principal = owner.value;
        if (days.value) body.expires_in_ms = Math.round(Number(days.value) * DAY_MS);
        const minted = await post('/api/v1/tokens', body);
        const value =
            h('input', {id: 'token-value', readonly: true, class: 'mono', value: minted.token});
        replace(
            shown, notice('Copy this token now: it is shown once and never again.', 'warn'),
            field('New token', value));
        value.select();
      }, shown);
  content.push(
      section(
          admin ? 'Tokens' : 'Your tokens',
          table(
              [
                {label: 'Token', cell: (t) => h('code', {title: t.id, text: shortId(t.id)})},
                {
                  label: 'Principal',
                  cell: (t) => names.get(t.principal_id) || shortId(t.principal_id)
                },
                {label: 'Created', class: 'wide', cell: (t) => timeEl(t.created_at)},
                {label: 'Expires', cell: (t) => timeEl(t.expires_at)},
                {label: 'Last used', class: 'wide', cell: (t) => timeEl(t.last_used_at)},
                {
                  label: 'State',
                  cell: (t) =>
                      (t.revoked_at ?
                           badge('revoked') :
                           actionButton(
                               'Revoke', 'self',
                               async () => (await post(`/api/v1/tokens/${t.id}/revoke`), reload()),
                               {errors, confirm: 'Confirm revoke'})),
                },
              ],
              tokens.items || [],
              'No token.',
              ),
          tokenForm,
          ),
  );

  if (admin) {
    const who =
        h('input',
          {id: 'install-principal', required: true, autocomplete: 'off', placeholder: 'alice'});
    const role = select(
        session.who.installation_role === 'owner' ? ['admin', 'owner', 'none'] : ['admin', 'none'],
        'admin', {id: 'install-role'});
    const form = inlineForm(
        'install-form', [field('Principal', who), field('Role', role, 'none revokes')],
        'Set installation role', 'install', async () => {
          await post(
              '/api/v1/installation/bindings',
              {principal: who.value.trim(), role: role.value, mutation_id: randomId()});
          reload();
        });
    content.push(
        section(
            'Installation roles',
            h('p', {
              class: 'muted small',
              text:
                  'An installation owner or admin holds that role in every project and manages principals, tokens, projects and the audit.'
            }),
            table(
                [
                  {label: 'Principal', cell: (b) => b.principal},
                  {label: 'Role', cell: (b) => b.role},
                  {label: 'Since', cell: (b) => timeEl(b.created_at)},
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
  ['off', 'No one'],
  ['admins', 'Installation owners and admins'],
  ['everyone', 'Everyone'],
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
            'Require a second factor', required,
            'No one: each person chooses. Someone who must have one and has none can do nothing but set it up after signing in.')
      ],
      'Save', 'install', async () => {
        const now = await post('/api/v1/settings', {require_second_factor: required.value});
        required.value = now.require_second_factor || required.value;
        const chosen = SECOND_FACTOR_CHOICES.find(([v]) => v === required.value);
        const whom = chosen ? chosen[1].toLowerCase() : required.value;
        replace(saved, notice(`Saved: a second factor is now required of ${whom}.`));
      });
  return section('Sign-in policy', errors, saved, settings.error ? null : form);
}
