// The panel's entry point: sign-in (password, single sign-on, first-start set-up, token), the
// header (navigation, project switcher, who you are), the screen a restricted session must
// pass first, and a hash router that renders one page module at a time. Each page gets an
// AbortSignal that fires when the page is left, so its requests, timers and log streams stop
// with it.

import {ApiError, get, post, resumeCookieSession, setRestrictedHandler, setUnauthorizedHandler, setUp, signInMethods, signInWithPassword} from './lib/api.js';
import {h, replace} from './lib/dom.js';
import {viewerZone} from './lib/format.js';
import {locale, LOCALES, setLocale, t} from './lib/i18n.js';
import {session} from './lib/session.js';
import {setTheme, themeChoice} from './lib/theme.js';
import {errorBox, errorText, field, notice, onSubmit, select} from './lib/ui.js';
import {passwordForm, totpEnrolment} from './pages/account.js';
import {pages} from './pages/registry.js';

const top = document.getElementById('top');
const main = document.getElementById('main');
// The page's own words, written in English, in the chosen language.
document.querySelector('.skip').textContent = t('Skip to content');
main.querySelector('p.muted')?.replaceChildren(t('Loading…'));
let current = null;  // {controller} of the page on screen

// What a failed single sign-on's code (`/?sign_in_error=CODE`, the server's redirect) means.
const SIGN_IN_ERRORS = {
  oidc_failed:
      t('Single sign-on did not succeed. Try again, or sign in with your name and password.'),
  oidc_state_invalid: t(
      'The single sign-on attempt expired or was started in another tab. Start it again from here.'),
  oidc_no_principal: t(
      'The identity provider signed you in, but no QingLong account is linked to that identity. Ask an administrator to add you.'),
  oidc_unavailable: t(
      'Single sign-on is unavailable: the identity provider could not be reached. Try again later, or sign in with your name and password.'),
  principal_disabled: t('Your QingLong account is disabled. Ask an administrator to enable it.'),
};

// The code of a failed single sign-on, taken out of the address bar at once and shown by the
// sign-in screen.
let signInError = null;
{
  const query = new URLSearchParams(location.search);
  if (query.has('sign_in_error')) {
    signInError = query.get('sign_in_error') || 'sign_in_failed';
    query.delete('sign_in_error');
    const rest = query.toString();
    history.replaceState(null, '', location.pathname + (rest ? `?${rest}` : '') + location.hash);
  }
}

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

// Returns the header's language and theme switches (remembered in localStorage).
function preferences() {
  const lang = select(LOCALES, locale, {id: 'lang-select', 'aria-label': t('Language')});
  lang.addEventListener('change', () => setLocale(lang.value));
  const theme = select(
      [['system', t('System theme')], ['light', t('Light theme')], ['dark', t('Dark theme')]],
      themeChoice(), {id: 'theme-select', 'aria-label': t('Theme')});
  theme.addEventListener('change', () => setTheme(theme.value));
  return h('span', {class: 'prefs'}, lang, theme);
}

function brandOnly() {
  top.classList.remove('has-menu', 'menu-open');
  replace(
      top,
      h('div', {class: 'brand'}, h('span', {class: 'logo', 'aria-hidden': 'true'}), 'QingLong'),
      h('div', {class: 'bar who'}, preferences()));
}

// Returns a single sign-on link for `oidc` ({name, url}), or null when its URL is not http(s).
function oidcLink(oidc) {
  let url;
  try {
    url = new URL(oidc.url, location.href);
  } catch {
    return null;
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') return null;
  // A top-level navigation: the server answers with a redirect to the identity provider.
  return h('a', {
    class: 'btn',
    id: 'signin-oidc',
    href: url.href,
    text: t('Sign in with {name}', {name: oidc.name || t('single sign-on')}),
  });
}

// The first-start form: the one-time set-up code the server wrote to its data directory and
// the owner's first password, twice.
function setUpForm() {
  const errors = errorBox();
  const code = h('input', {
    id: 'setup-code',
    required: true,
    autocomplete: 'off',
    spellcheck: 'false',
    class: 'mono',
  });
  const password = h('input', {
    type: 'password',
    id: 'setup-password',
    autocomplete: 'new-password',
    required: true,
  });
  const again = h('input', {
    type: 'password',
    id: 'setup-password-repeat',
    autocomplete: 'new-password',
    required: true,
  });
  const form = h(
      'form', {class: 'card signin', id: 'setup-form', 'aria-labelledby': 'setup-title'},
      h('h1', {id: 'setup-title', text: t('Set up QingLong')}), h('p', {
        class: 'muted',
        text: t(
            'First start: the owner has no password yet. Choose it with the one-time set-up code the server wrote to setup.code in its data directory.'),
      }),
      errors,
      field(
          t('Set-up code'), code,
          t('On the server: cat DATA_DIR/setup.code (data/setup.code for scripts/start-local.sh). It works once.')),
      field(
          t('Owner password'), password,
          t('At least 12 characters; a phrase is easiest to remember.')),
      field(t('Owner password again'), again),
      h('button', {type: 'submit', class: 'btn primary', text: t('Set the password and sign in')}));
  return onSubmit(form, errors, async () => {
    if (password.value !== again.value) {
      throw Object.assign(new Error(t('the two passwords differ')), {code: 'form'});
    }
    session.clear();
    await startSession(await setUp(code.value.trim(), password.value));
  });
}

// Continues after a sign-in or set-up answer: keeps its CSRF token and restriction, reads who
// signed in and shows the page asked for (or the restricted screen).
async function startSession(answer) {
  session.setCsrf(answer.csrf_token);
  session.hint = 'restriction' in answer ? answer.restriction || null :
                                           (answer.must_change_password ? 'password_change' : null);
  await loadIdentity();
  render();
}

function signInView(reason) {
  leavePage();
  brandOnly();
  const errors = errorBox();
  if (reason) {
    errors.show(reason);
  } else if (signInError) {
    errors.show({
      code: signInError,
      message: SIGN_IN_ERRORS[signInError] || t('signing in did not succeed')
    });
  }
  signInError = null;
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
  const totpField = h('div', {class: 'field', hidden: true}, h('label', {for: 'signin-totp', text: t('One-time code (or a recovery code)')
                      }), totp);
  // Single sign-on, once the server says it offers it.
  const others = h('div', {class: 'other-methods', id: 'signin-other', hidden: true});
  const form = h(
      'form',
      {class: 'card signin', id: 'signin-form', 'aria-labelledby': 'signin-title'},
      h('h1', {id: 'signin-title', text: t('Sign in')}),
      errors,
      h('div', {class: 'field'},
        h('label',
          {for: 'signin-name', text: t('Name')
          }),
        name),
      h('div', {class: 'field'},
        h('label',
          {for: 'signin-password', text: t('Password')
          }),
        password),
      totpField,
      h('button', {type: 'submit', class: 'btn primary', text: t('Sign in')}),
      others,
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
    await startSession(answer);
  });
  const tokenErrors = errorBox();
  const input = h('input', {
    type: 'password',
    id: 'token',
    name: 'token',
    autocomplete: 'off',
    spellcheck: 'false',
    required: true,
    placeholder: t('API token'),
  });
  const tokenForm = h(
      'form',
      {class: 'card signin', id: 'token-signin', 'aria-labelledby': 'token-title'},
      h('h2', {id: 'token-title', text: t('Or use an API token')}),
      h('p', {
        class: 'muted',
        text: t(
            'For programs and first set-up: ql-local writes the owner token to data/owner.token; `ql token create` makes more. It is kept in this tab only (sessionStorage) and sent as a bearer header, never in a URL or cookie.'),
      }),
      tokenErrors,
      h('div', {class: 'field'},
        h('label',
          {for: 'token', text: t('Token')
          }),
        input),
      h('button', {type: 'submit', class: 'btn', text: t('Sign in with the token')}),
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
  // What else the server offers arrives after the form is on screen; a server without the
  // route offers the password only.
  signInMethods().then((methods) => {
    if (!form.isConnected) return;
    const link = methods.oidc ? oidcLink(methods.oidc) : null;
    if (link) {
      replace(others, h('p', {class: 'or muted', text: t('or')}), link);
      others.hidden = false;
    }
    if (methods.setup) {
      const setup = setUpForm();
      main.prepend(setup);
      // To the set-up code, unless the person has started typing already.
      if (document.activeElement === name && !name.value) {
        setup.querySelector('#setup-code').focus();
      }
    }
  });
}

// The one screen a restricted session sees until it has done what the server asks: choose a
// new password, or set up a second factor. No navigation; then the panel goes on as usual.
function restrictedView(restriction) {
  leavePage();
  // Already on screen (the address changed): keep it, and whatever was typed into it.
  if (main.querySelector('#restricted')?.dataset.restriction === restriction) return;
  const out =
      h('button', {type: 'button', class: 'btn subtle', id: 'signout', text: t('Sign out')});
  out.addEventListener('click', () => signOut());
  top.classList.remove('has-menu', 'menu-open');
  replace(
      top,
      h('div', {class: 'bar'},
        h('span', {class: 'brand'}, h('span', {class: 'logo', 'aria-hidden': 'true'}), 'QingLong')),
      h('div', {class: 'bar who'},
        h('span', {class: 'identity', id: 'identity'},
          h('strong', {text: session.who.principal.name})),
        preferences(), out));
  const proceed = async () => {
    session.hint = null;
    session.who = null;
    main.replaceChildren();  // drawn again should whoami still say restricted
    await render();
  };
  let title;
  let body;
  if (restriction === 'password_change') {
    title = t('Choose a new password');
    body = [
      h('p', {
        text: t(
            'Your password was set by an administrator or has to be replaced: choose your own before going on.'),
      }),
      passwordForm(proceed, {label: t('Change password and continue')}),
    ];
  } else if (restriction === 'totp_enrolment') {
    title = t('Set up a second factor');
    body = [
      h('p', {
        text: t(
            'This installation requires a second factor for your account: a one-time code from an authenticator app, asked for after your password. Set it up before going on.'),
      }),
      totpEnrolment(proceed, {onAlreadyOn: proceed, cancellable: false}),
    ];
  } else {
    title = t('Your session is restricted');
    body = [notice(
        t('The server restricts this session ({restriction}). Sign out and in again, or ask an administrator.',
          {restriction}),
        'warn')];
  }
  document.title = `${title} · QingLong`;
  replace(
      main,
      h('section', {class: 'card forced', id: 'restricted', dataset: {restriction}},
        h('h1', {text: title}), body));
}

async function loadIdentity() {
  session.who = await get('/api/v1/whoami');
  // A restricted session may read nothing else.
  session.projects = session.restriction ? [] : (await get('/api/v1/projects')).items || [];
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
      {class: 'nav', 'aria-label': t('Sections')},
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
      (p) => [p.slug, p.status === 'archived' ? t('{slug} (archived)', {slug: p.slug}) : p.slug]);
  if (!known.some(([slug]) => slug === session.project))
    known.push([session.project, session.project]);
  const projectSelect = select(known, session.project, {id: 'project', 'aria-label': t('Project')});
  projectSelect.addEventListener('change', () => {
    session.setProject(projectSelect.value);
    navigate(parseHash().path === '/' ? '/' : `/${parseHash().path.split('/')[1]}`);
  });
  const roleText = t(session.role());
  const out =
      h('button', {type: 'button', class: 'btn subtle', id: 'signout', text: t('Sign out')});
  out.addEventListener('click', () => signOut());
  // Narrow screens: the navigation and the rest of the header fold behind a menu button.
  const menu = h('button', {
    type: 'button',
    class: 'btn subtle menu-toggle',
    id: 'menu-toggle',
    'aria-expanded': 'false',
    'aria-controls': 'nav',
    text: t('Menu'),
  });
  menu.addEventListener('click', () => {
    const open = top.classList.toggle('menu-open');
    menu.setAttribute('aria-expanded', String(open));
  });
  nav.id = 'nav';
  // Choosing an item closes the menu, also when it is the page already on screen.
  nav.addEventListener('click', () => {
    top.classList.remove('menu-open');
    menu.setAttribute('aria-expanded', 'false');
  });
  top.classList.add('has-menu');
  top.classList.remove('menu-open');
  replace(
      top,
      h('div', {class: 'bar'},
        h('a', {class: 'brand', href: '#/'}, h('span', {class: 'logo', 'aria-hidden': 'true'}),
          'QingLong'),
        menu, nav),
      h(
          'div',
          {class: 'bar who'},
          h('label', {class: 'project'}, h('span', {class: 'muted', text: t('Project')}),
            projectSelect),
          h(
              'span',
              {
                class: 'identity',
                id: 'identity',
                title: t('principal {id}', {id: who.principal.id})
              },
              h('a', {
                id: 'account-link',
                href: `#/account?${new URLSearchParams({project: session.project})}`,
                title: t('Your account: sessions, password, second factor'),
                'aria-current': path === '/account' ? 'page' : false,
              },
                h('strong', {text: who.principal.name})),
              ' · ',
              h('span', {id: 'role', text: roleText}),
              who.installation_role ? h('span', {
                class: 'muted',
                text: t(' (installation {role})', {role: t(who.installation_role)}),
              }) :
                                      null,
              ),
          h('span',
            {class: 'muted small zone-note', text: t('Times in {zone}', {zone: viewerZone})}),
          preferences(),
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
    signInError = null;
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
            {class: 'banner error', role: 'alert', text: `${err.code || ''} ${errorText(err)}`}));
      return;
    }
  }
  if (session.restriction) return restrictedView(session.restriction);
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
    replace(main, h('h1', {text: t('Not found')}), h('p', {text: t('No page at {path}.', {path})}));
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
// A call refused because the session is restricted: show the screen that lifts it.
setRestrictedHandler((restriction) => {
  if (!session.who || session.restriction === restriction) return;
  session.hint = restriction;
  if (session.who.session) session.who.session.restriction = restriction;
  render();
});
window.addEventListener('hashchange', () => render());
render();
