// Projects, their members and roles: the projects you hold a role in, a new project
// (installation admins), archiving (owners), and granting or revoking roles (admins).

import {get, post} from '../lib/api.js';
import {h, randomId, replace} from '../lib/dom.js';
import {timeEl} from '../lib/format.js';
import {t} from '../lib/i18n.js';
import {session} from '../lib/session.js';
import {actionButton, allowed, badge, errorBox, facts, field, inlineForm, notice, pageHeader, section, select, table} from '../lib/ui.js';

export const nav = {
  label: t('Projects'),
  path: '/projects'
};
export const routes = [
  {pattern: '/projects', render: renderList},
  {pattern: '/projects/:slug', render: renderProject},
];

export const ROLE_HELP = t(
    'viewer reads; operator also starts, cancels and retries runs and enables or disables triggers; admin also publishes tasks and triggers and grants roles up to admin; owner also grants owner and archives the project.');

// Returns a link to a project's page that also makes it the current project.
function projectLink(p) {
  const q = new URLSearchParams({project: p.slug});
  return h(
      'a',
      {href: `#/projects/${encodeURIComponent(p.slug)}?${q}`, class: 'project-link', text: p.slug});
}

async function renderList(ctx) {
  ctx.title(t('Projects'));
  const errors = errorBox();
  const list = (await get('/api/v1/projects', {}, ctx.signal)).items || [];
  session.projects = list;
  const tbl = table(
      [
        {label: t('Project'), cell: projectLink},
        {label: t('Name'), cell: (p) => p.name},
        {label: t('Status'), cell: (p) => badge(p.status === 'active' ? 'active' : 'disabled')},
        {label: t('Your role'), cell: (p) => roleOf(p)},
        {label: t('Created'), class: 'wide', cell: (p) => timeEl(p.created_at)},
      ],
      list,
  );
  let createForm = null;
  if (allowed('install')) {
    const slug = h('input', {
      id: 'project-slug',
      required: true,
      pattern: '[a-z0-9-]{1,64}',
      placeholder: t('payments'),
    });
    const name = h('input', {id: 'project-name', placeholder: t('Payments')});
    createForm = inlineForm(
        'project-form',
        [field(t('Slug'), slug, t('1–64 of a-z, 0-9 and -')), field(t('Name'), name)],
        t('Create project'), 'install', async () => {
          const p = await post(
              '/api/v1/projects', {slug: slug.value.trim(), name: name.value.trim() || undefined});
          session.who = await get('/api/v1/whoami');
          session.setProject(p.slug);
          ctx.navigate(`/projects/${p.slug}`);
        });
  }
  replace(
      ctx.main, pageHeader(t('Projects')), errors, section(null, tbl),
      createForm ? section(t('New project'), createForm) : null);
}

function roleOf(p) {
  const inst = session.who?.installation_role;
  const own = (session.who?.projects || []).find((x) => x.id === p.id)?.role;
  return [own ? t(own) : null, inst ? t('installation {role}', {role: t(inst)}) : null]
             .filter(Boolean)
             .join(t(', ')) ||
      '—';
}

async function renderProject(ctx) {
  const slug = ctx.params.slug;
  const errors = errorBox();
  const project = await get(`/api/v1/projects/${encodeURIComponent(slug)}`, {}, ctx.signal);
  ctx.title(t('Project {slug}', {slug: project.slug}));
  const reload = () => ctx.navigate(`/projects/${project.slug}`, {t: Date.now()});
  const bindings =
      (await get(`/api/v1/projects/${encodeURIComponent(slug)}/bindings`, {}, ctx.signal)).items ||
      [];
  const write = async (principal, role) => {
    await post(
        `/api/v1/projects/${encodeURIComponent(slug)}/bindings`,
        {principal, role, mutation_id: randomId()});
    session.who = await get('/api/v1/whoami');
    reload();
  };
  const members = table(
      [
        {label: t('Principal'), cell: (b) => b.principal},
        {label: t('Role'), cell: (b) => h('span', {class: `role role-${b.role}`, text: t(b.role)})},
        {label: t('Since'), class: 'wide', cell: (b) => timeEl(b.created_at)},
        {label: t('Version'), class: 'wide num', cell: (b) => String(b.version)},
        {
          label: '',
          class: 'row-actions',
          cell: (b) => actionButton(
              t('Revoke'), b.role === 'owner' ? 'owner' : 'admin', () => write(b.principal, 'none'),
              {errors, confirm: t('Confirm revoke')}),
        },
      ],
      bindings,
      t('No member.'),
  );
  let grant = null;
  if (allowed('admin') && project.status === 'active') {
    const who =
        h('input',
          {id: 'grant-principal', required: true, placeholder: 'alice', autocomplete: 'off'});
    const roles = session.can('owner') ? ['viewer', 'operator', 'admin', 'owner'] :
                                         ['viewer', 'operator', 'admin'];
    const role = select(roles.map((r) => [r, t(r)]), 'viewer', {id: 'grant-role'});
    grant = inlineForm(
        'grant-form', [field(t('Principal'), who, t('Name or id')), field(t('Role'), role)],
        t('Grant role'), 'admin', () => write(who.value.trim(), role.value));
  }
  replace(
      ctx.main,
      pageHeader(
          t('Project {slug}', {slug: project.slug}),
          project.status === 'active' ?
              actionButton(
                  t('Archive project'),
                  'owner',
                  async () => {
                    await post(`/api/v1/projects/${encodeURIComponent(slug)}/archive`);
                    reload();
                  },
                  {errors, kind: 'danger', confirm: t('Confirm archive: stops its triggers')},
                  ) :
              null,
          ),
      errors,
      project.status !== 'active' ?
          notice(
              t('This project is archived: its triggers admit nothing and nothing in it can be changed.'),
              'warn') :
          null,
      section(null, facts([
                [t('Name'), project.name], [t('Status'), t(project.status)],
                [t('Version'), String(project.version)], [t('Created'), timeEl(project.created_at)],
                [t('Id'), h('code', {text: project.id})]
              ])),
      section(t('Members'), members, grant, h('p', {class: 'muted small', text: ROLE_HELP})),
  );
}
