// Projects, their members and roles: the projects you hold a role in, a new project
// (installation admins), archiving (owners), and granting or revoking roles (admins).

import {get, post} from '../lib/api.js';
import {h, randomId, replace} from '../lib/dom.js';
import {timeEl} from '../lib/format.js';
import {session} from '../lib/session.js';
import {actionButton, allowed, badge, errorBox, facts, field, inlineForm, notice, pageHeader, section, select, table} from '../lib/ui.js';

export const nav = {
  label: 'Projects',
  path: '/projects'
};
export const routes = [
  {pattern: '/projects', render: renderList},
  {pattern: '/projects/:slug', render: renderProject},
];

export const ROLE_HELP =
    'viewer reads; operator also starts, cancels and retries runs and enables or disables triggers; ' +
    'admin also publishes tasks and triggers and grants roles up to admin; owner also grants owner and archives the project.';

// Returns a link to a project's page that also makes it the current project.
function projectLink(p) {
  const q = new URLSearchParams({project: p.slug});
  return h(
      'a',
      {href: `#/projects/${encodeURIComponent(p.slug)}?${q}`, class: 'project-link', text: p.slug});
}

async function renderList(ctx) {
  ctx.title('Projects');
  const errors = errorBox();
  const list = (await get('/api/v1/projects', {}, ctx.signal)).items || [];
  session.projects = list;
  const tbl = table(
      [
        {label: 'Project', cell: projectLink},
        {label: 'Name', cell: (p) => p.name},
        {label: 'Status', cell: (p) => badge(p.status === 'active' ? 'active' : 'disabled')},
        {label: 'Your role', cell: (p) => roleOf(p)},
        {label: 'Created', class: 'wide', cell: (p) => timeEl(p.created_at)},
      ],
      list,
  );
  let createForm = null;
  if (allowed('install')) {
    const slug = h('input', {
      id: 'project-slug',
      required: true,
      pattern: '[a-z0-9-]{1,64}',
      placeholder: 'payments',
    });
    const name = h('input', {id: 'project-name', placeholder: 'Payments'});
    createForm = inlineForm(
        'project-form', [field('Slug', slug, '1–64 of a-z, 0-9 and -'), field('Name', name)],
        'Create project', 'install', async () => {
          const p = await post(
              '/api/v1/projects', {slug: slug.value.trim(), name: name.value.trim() || undefined});
          session.who = await get('/api/v1/whoami');
          session.setProject(p.slug);
          ctx.navigate(`/projects/${p.slug}`);
        });
  }
  replace(
      ctx.main, pageHeader('Projects'), errors, section(null, tbl),
      createForm ? section('New project', createForm) : null);
}

function roleOf(p) {
  const inst = session.who?.installation_role;
  const own = (session.who?.projects || []).find((x) => x.id === p.id)?.role;
  return [own, inst ? `installation ${inst}` : null].filter(Boolean).join(', ') || '—';
}

async function renderProject(ctx) {
  const slug = ctx.params.slug;
  const errors = errorBox();
  const project = await get(`/api/v1/projects/${encodeURIComponent(slug)}`, {}, ctx.signal);
  ctx.title(`Project ${project.slug}`);
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
        {label: 'Principal', cell: (b) => b.principal},
        {label: 'Role', cell: (b) => h('span', {class: `role role-${b.role}`, text: b.role})},
        {label: 'Since', class: 'wide', cell: (b) => timeEl(b.created_at)},
        {label: 'Version', class: 'wide num', cell: (b) => String(b.version)},
        {
          label: '',
          class: 'row-actions',
          cell: (b) => actionButton(
              'Revoke', b.role === 'owner' ? 'owner' : 'admin', () => write(b.principal, 'none'),
              {errors, confirm: 'Confirm revoke'}),
        },
      ],
      bindings,
      'No member.',
  );
  let grant = null;
  if (allowed('admin') && project.status === 'active') {
    const who =
        h('input',
          {id: 'grant-principal', required: true, placeholder: 'alice', autocomplete: 'off'});
    const roles = session.can('owner') ? ['viewer', 'operator', 'admin', 'owner'] :
                                         ['viewer', 'operator', 'admin'];
    const role = select(roles, 'viewer', {id: 'grant-role'});
    grant = inlineForm(
        'grant-form', [field('Principal', who, 'Name or id'), field('Role', role)], 'Grant role',
        'admin', () => write(who.value.trim(), role.value));
  }
  replace(
      ctx.main,
      pageHeader(
          `Project ${project.slug}`,
          project.status === 'active' ?
              actionButton(
                  'Archive project',
                  'owner',
                  async () => {
                    await post(`/api/v1/projects/${encodeURIComponent(slug)}/archive`);
                    reload();
                  },
                  {errors, kind: 'danger', confirm: 'Confirm archive: stops its triggers'},
                  ) :
              null,
          ),
      errors,
      project.status !== 'active' ?
          notice(
              'This project is archived: its triggers admit nothing and nothing in it can be changed.',
              'warn') :
          null,
      section(null, facts([
                ['Name', project.name], ['Status', project.status],
                ['Version', String(project.version)], ['Created', timeEl(project.created_at)],
                ['Id', h('code', {text: project.id})]
              ])),
      section('Members', members, grant, h('p', {class: 'muted small', text: ROLE_HELP})),
  );
}
