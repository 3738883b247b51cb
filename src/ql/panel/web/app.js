// The panel's entry point: sign-in, the header (navigation, project switcher, who you are),
// and a hash router that renders one page module at a time. Each page gets an AbortSignal
// that fires when the page is left, so its requests, timers and log streams stop with it.

import {ApiError, get, post, resumeCookieSession, setUnauthorizedHandler, signInWithPassword} from './lib/api.js';
import {h, replace} from './lib/dom.js';
import {viewerZone} from './lib/format.js';
import {session} from './lib/session.js';
import {errorBox, onSubmit, select} from './lib/ui.js';
import {pages} from './pages/registry.js';

const top = document.getElementById('top');
const main = document.getElementById('main');
let current = null;  // {controller} of the page on screen

const routes = pages.flatMap(
    (p) => p.routes.map((r) => ({...r, segments: r.pattern.split('/').filter(Boolean)})));

function parseHash() {
  const raw = location.hash.replace(/^#/, '') || '/';
  const [path, qs = ''] = raw.split('?');
  return {path: path || '/', query: Object.fromEntries(new URLSearchParams(qs))};
}

function match(path) {
  const parts = path.split('/').filter(Boolean).map(decodeURIComponent);
  for (const route of routes) {
    if (route.segments.length !== parts.length) continue;
    const params = {};
    let ok = true;
    route.segments.forEach((seg, i) => {
      if (seg.startsWith(':'))
        params[seg.slice(1)] = parts[i];
      else if (seg !== parts[i])
        ok = false;
    });
    if (ok) return {route, params};
  }
  return null;
}

// Goes to `path` with `query`, keeping the project.
export function navigate(path, query = {}) {
  const q = new URLSearchParams(query);
  q.set('project', session.project);
  location.hash = `#${path}?${q.toString()}`;
}

function leavePage() {
  if (current) current.controller.abort();
  current = null;
}

function signInView(reason) {
  leavePage();
  top.replaceChildren(
      h('div', {class: 'brand'}, h('span', {class: 'logo', 'aria-hidden': 'true'}), 'QingLong'));
  const errors = errorBox();
  if (reason) errors.show(reason);
  const name = h('input', {
    type: 'text',
    id: 'signin-name',
    name: 'username',
    autocomplete: 'username',
    spellcheck: 'false',
    required: true,
  });
  const password = h('input', {
    type: 'password',
    id: 'signin-password',
    name: 'password',
    autocomplete: 'current-password',
    required: true,
  });
  // Asked for once the server says the account has a second factor.
  const totp = h('input', {
    type: 'text',
    id: 'signin-totp',
    name: 'one-time-code',
    autocomplete: 'one-time-code',
    inputmode: 'numeric',
    spellcheck: 'false',
  });
  const totpField = h('div', {class: 'field', hidden: true},
                      h('label', {for: 'signin-totp', text: 'One-time code (or a recovery code)'}),
                      totp);
  const form = h(
      'form',
      {class: 'card signin', id: 'signin-form', 'aria-labelledby': 'signin-title'},
      h('h1', {id: 'signin-title', text: 'Sign in'}),
      errors,
      h('div', {class: 'field'}, h('label', {for: 'signin-name', text: 'Name'}), name),
      h('div', {class: 'field'}, h('label', {for: 'signin-password', text: 'Password'}), password),
      totpField,
      h('button', {type: 'submit', class: 'btn primary', text: 'Sign in'}),
  );
  onSubmit(form, errors, async () => {
    session.clear();
    let answer;
    try {
      answer = await signInWithPassword(name.value.trim(), password.value, totp.value.trim());
    } catch (err) {
      if (err.code === 'totp_required') {
        totpField.hidden = false;
        totp.focus();
      }
      throw err;
    }
    session.setCsrf(answer.csrf_token);
    await loadIdentity();
    render();
  });
  const tokenErrors = errorBox();
  const input = h('input', {
    type: 'password',
    id: 'token',
    name: 'token',
    autocomplete: 'off',
    spellcheck: 'false',
    required: true,
    placeholder: 'API token',
  });
  const tokenForm = h(
      'form',
      {class: 'card signin', id: 'token-signin', 'aria-labelledby': 'token-title'},
      h('h2', {id: 'token-title', text: 'Or use an API token'}),
      h('p', {
        class: 'muted',
        text:
            'For programs and first set-up: ql-local writes the owner token to data/owner.token; `ql token create` makes more. It is kept in this tab only (sessionStorage) and sent as a bearer header, never in a URL or cookie.',
      }),
      tokenErrors,
      h('div', {class: 'field'}, h('label', {for: 'token', text: 'Token'}), input),
      h('button', {type: 'submit', class: 'btn', text: 'Sign in with the token'}),
  );
  onSubmit(tokenForm, tokenErrors, async () => {
    session.clear();
    session.setToken(input.value.trim());
    try {
      await loadIdentity();
    } catch (err) {
      session.clear();
      throw err;
    }
    render();
  });
  replace(main, form, tokenForm);
  name.focus();
}

async function loadIdentity() {
  session.who = await get('/api/v1/whoami');
  session.projects = (await get('/api/v1/projects')).items || [];
}

function signOut(reason) {
  // A cookie session ends on the server too (best effort: the page signs out either way).
  if (!session.token && session.csrf && !reason) post('/api/v1/sign-out').catch(() => {});
  session.clear();
  history.replaceState(null, '', location.pathname);
  signInView(reason);
}

function header(path) {
  const who = session.who;
  const nav = h(
      'nav',
      {class: 'nav', 'aria-label': 'Sections'},
      pages.filter((p) => p.nav && (!p.nav.visible || p.nav.visible(session))).map((p) => {
        const active = p.nav.path === '/' ? path === '/' : path.startsWith(p.nav.path);
        const q = new URLSearchParams({project: session.project});
        return h('a', {
          href: `#${p.nav.path}?${q}`,
          class: active ? 'active' : '',
          'aria-current': active ? 'page' : false,
          text: p.nav.label
        });
      }),
  );
  const known = session.projects.map(
      (p) => [p.slug, p.status === 'archived' ? `${p.slug} (archived)` : p.slug]);
  if (!known.some(([slug]) => slug === session.project))
    known.push([session.project, session.project]);
  const projectSelect = select(known, session.project, {id: 'project', 'aria-label': 'Project'});
  projectSelect.addEventListener('change', () => {
    session.setProject(projectSelect.value);
    navigate(parseHash().path === '/' ? '/' : `/${parseHash().path.split('/')[1]}`);
  });
  const roleText = session.role();
  const out = h('button', {type: 'button', class: 'btn subtle', id: 'signout', text: 'Sign out'});
  out.addEventListener('click', () => signOut());
  replace(
      top,
      h('div', {class: 'bar'},
        h('a', {class: 'brand', href: '#/'}, h('span', {class: 'logo', 'aria-hidden': 'true'}),
          'QingLong'),
        nav),
      h(
          'div',
          {class: 'bar who'},
          h('label', {class: 'project'}, h('span', {class: 'muted', text: 'Project'}),
            projectSelect),
          h(
              'span',
              {class: 'identity', id: 'identity', title: `principal ${who.principal.id}`},
              h('strong', {text: who.principal.name}),
              ' · ',
              h('span', {id: 'role', text: roleText}),
              who.installation_role ?
                  h('span', {class: 'muted', text: ` (installation ${who.installation_role})`}) :
                  null,
              ),
          h('span', {class: 'muted small zone-note', text: `Times in ${viewerZone}`}),
          out,
          ),
  );
}

async function render() {
  if (!session.signedIn) {
    // A new tab or a reload: the session cookie may still be live.
    const resumed = await resumeCookieSession().catch(() => null);
    if (!resumed) return signInView();
    session.setCsrf(resumed.session.csrf_token);
  }
  const {path, query} = parseHash();
  if (query.project && query.project !== session.project) session.setProject(query.project);
  if (!session.who) {
    try {
      await loadIdentity();
    } catch (err) {
      if (err instanceof ApiError && err.status === 401) return;  // the handler signed out
      replace(
          main,
          h('div',
            {class: 'banner error', role: 'alert', text: `${err.code || ''} ${err.message}`}));
      return;
    }
  }
  leavePage();
  header(path);
  const found = match(path);
  const controller = new AbortController();
  current = {controller};
  const ctx = {
    params: found?.params || {},
    query,
    main,
    signal: controller.signal,
    navigate,
    // Calls `fn` every `ms` until the page is left (not while the tab is hidden).
    every(ms, fn) {
      const id = setInterval(() => {
        if (!document.hidden) fn();
      }, ms);
      controller.signal.addEventListener('abort', () => clearInterval(id));
    },
    title(text) {
      document.title = `${text} · QingLong`;
    },
  };
  main.replaceChildren();
  if (!found) {
    replace(main, h('h1', {text: 'Not found'}), h('p', {text: `No page at ${path}.`}));
    return;
  }
  try {
    await found.route.render(ctx);
  } catch (err) {
    if (err.name === 'AbortError' || controller.signal.aborted || err.status === 401) return;
    const box = errorBox();
    box.show(err);
    main.append(box);
  }
}

setUnauthorizedHandler((err) => signOut(err));
window.addEventListener('hashchange', () => render());
render();
