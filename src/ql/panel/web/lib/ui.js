// Shared pieces of every page: headings, error banners, tables, pagers, role-gated buttons,
// form fields. A mutating button is created only when the caller's role allows it (and carries
// data-needs with that role), so a viewer's pages hold no edit controls at all.

import {h, replace} from './dom.js';
import {codeMessage, t} from './i18n.js';
import {session} from './session.js';

let fieldCounter = 0;

// Returns a page heading with optional actions on the right.
export function pageHeader(title, ...actions) {
  return h(
      'div', {class: 'page-head'}, h('h1', {text: title}), h('div', {class: 'actions'}, actions));
}

export function section(title, ...children) {
  return h('section', {class: 'card'}, title ? h('h2', {text: title}) : null, children);
}

// Returns an error banner (role=alert) with show(err) / clear(); hidden while empty. An
// ApiError shows as "code: message": the panel's words for a code it knows in the chosen
// language, else the server's own; the code always shows.
export function errorBox() {
  const el = h('div', {class: 'banner error', role: 'alert', hidden: true});
  el.show = (err) => {
    const code = err?.code ? `${err.code}: ` : '';
    replace(el, h('strong', {class: 'code', text: code}), errorText(err));
    el.hidden = false;
  };
  el.clear = () => {
    el.hidden = true;
    el.replaceChildren();
  };
  return el;
}

// Returns the message of `err` to show: the panel's text for its code in the chosen language
// (an ApiError's code it knows), else its own message.
export function errorText(err) {
  return (err?.code && err.code !== 'form' && codeMessage(err.code)) || err?.message || String(err);
}

// Returns a notice banner (role=status).
export function notice(text, kind = 'info') {
  return h('div', {class: `banner ${kind}`, role: 'status', text});
}

// Returns true when the caller may do what needs `role`: a role in the current project,
// 'install' (an installation admin) or 'self' (anyone signed in, on their own things).
export function allowed(role) {
  if (role === 'self') return !!session.who;
  return role === 'install' ? session.installationAdmin() : session.can(role);
}

// Returns a button for an action that needs `role` (see allowed), or null when the caller
// lacks it. While `run` (async) is pending the
// button is disabled; a failure goes to `errors` (an errorBox). `confirm` asks for a second
// click within 5 s, with the given label.
export function actionButton(label, role, run, {errors, kind = '', confirm = ''} = {}) {
  if (!allowed(role)) return null;
  let armed = false;
  let disarm = 0;
  const btn = h(
      'button', {type: 'button', class: `btn ${kind}`.trim(), dataset: {needs: role}, text: label});
  btn.addEventListener('click', async () => {
    if (confirm && !armed) {
      armed = true;
      btn.textContent = confirm;
      btn.classList.add('armed');
      disarm = setTimeout(() => {
        armed = false;
        btn.textContent = label;
        btn.classList.remove('armed');
      }, 5000);
      return;
    }
    clearTimeout(disarm);
    armed = false;
    btn.textContent = label;
    btn.classList.remove('armed');
    btn.disabled = true;
    errors?.clear();
    try {
      await run();
    } catch (err) {
      if (errors)
        errors.show(err);
      else
        throw err;
    } finally {
      btn.disabled = false;
    }
  });
  return btn;
}

// Returns a link styled as a button to a form page that needs `role`, or null.
export function actionLink(label, role, href) {
  if (!allowed(role)) return null;
  return h('a', {class: 'btn', href, dataset: {needs: role}, text: label});
}

// Returns a table over `rows`: columns are {label, cell(row) → node|string, class?}. `empty`
// is shown when there is no row; while `rows` is null (the first answer has not come) the
// table says it is loading instead, never that there is nothing. The table scrolls sideways
// inside its box on narrow screens.
export function table(columns, rows = null, empty = t('Nothing here yet.')) {
  const tbody = h('tbody');
  const tableEl = h(
      'table',
      {},
      h('thead', {},
        h('tr', {}, columns.map((c) => h('th', {scope: 'col', class: c.class, text: c.label})))),
      tbody,
  );
  const wrap = h('div', {class: 'table-wrap'}, tableEl);
  wrap.setRows = (list) => {
    if (list === null) {
      replace(
          tbody,
          h('tr', {},
            h('td', {colspan: columns.length, class: 'muted loading', text: t('Loading…')})));
      return;
    }
    replace(
        tbody,
        list.length ?
            list.map(
                (row) =>
                    h('tr', {},
                      columns.map(
                          (c) =>
                              h('td', {class: c.class, dataset: {label: c.label}}, c.cell(row))))) :
            h('tr', {}, h('td', {colspan: columns.length, class: 'muted empty', text: empty})),
    );
  };
  wrap.addRows = (list) => {
    if (tbody.querySelector('td.empty, td.loading, td.failed')) tbody.replaceChildren();
    for (const row of list) {
      tbody.append(
          h('tr', {},
            columns.map((c) => h('td', {class: c.class, dataset: {label: c.label}}, c.cell(row)))));
    }
  };
  // Says the rows could not be read (the error shows elsewhere), instead of "Loading…".
  wrap.setFailed = () => {
    if (!tbody.querySelector('td.loading')) return;
    replace(tbody, h('tr', {}, h('td', {
                       colspan: columns.length,
                       class: 'muted failed',
                       text: t('Not loaded: see the error above.'),
                     })));
  };
  // Returns the number of rows shown.
  wrap.count = () => [...tbody.rows]
                         .filter((r) => !r.querySelector('td.empty, td.loading, td.failed'))
                         .length;
  wrap.setRows(rows);
  return wrap;
}

// Returns a "Load more" control over `pager` (lib/api.js) that appends pages to `tableEl`
// through `filter` (items → items shown); it loads the first page at once. `stop(items)` may
// end the listing early (a time window passed). Errors go to `errors`.
export function pagedTable(
    tableEl, pager, {errors, signal, filter = (x) => x, stop = () => false} = {}) {
  const more = h('button', {type: 'button', class: 'btn', text: t('Load more')});
  const status = h('span', {class: 'muted small'});
  let first = true;
  let ended = false;
  const load = async () => {
    more.disabled = true;
    try {
      const items = await pager.next(signal);
      const kept = filter(items);
      if (first)
        tableEl.setRows(kept);
      else
        tableEl.addRows(kept);
      first = false;
      ended = pager.done || stop(items);
      more.hidden = ended;
      el.recount();
    } catch (err) {
      if (err.name !== 'AbortError') {
        errors?.show(err);
        if (first) tableEl.setFailed();
      }
    } finally {
      more.disabled = false;
    }
  };
  more.addEventListener('click', load);
  const el = h('div', {class: 'pager'}, more, status);
  // Shows how many rows the table holds (call after changing its rows).
  el.recount = () => {
    const n = tableEl.count();
    status.textContent = ended ? t('{n} shown, end of list', {n}) : t('{n} shown', {n});
  };
  el.ready = load();
  return el;
}

// Calls `run` when `form` is submitted, without a page load and with its submit buttons
// disabled meanwhile; a failure shows in `errors` (an errorBox), scrolled into view.
export function onSubmit(form, errors, run) {
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    errors.clear();
    const buttons = form.querySelectorAll('button[type=submit]');
    buttons.forEach((b) => (b.disabled = true));
    try {
      await run();
    } catch (err) {
      errors.show(err);
      errors.scrollIntoView({block: 'nearest'});
    } finally {
      buttons.forEach((b) => (b.disabled = false));
    }
  });
  return form;
}

// Returns a one-row form (id `id`): an error box, `fields`, and a submit button labelled
// `label` that needs `role` (see allowed; null for anyone), calling `run` on submit.
export function inlineForm(id, fields, label, role, run, ...after) {
  const errors = errorBox();
  const form =
      h('form', {class: 'form inline', id}, errors, h('div', {class: 'row'}, fields), h('button', {
          type: 'submit',
          class: 'btn primary',
          dataset: role ? {needs: role} : null,
          text: label,
        }),
        after);
  return onSubmit(form, errors, run);
}

// Returns a labelled form field around `input` (which gets an id), with an optional hint.
export function field(label, input, hint) {
  if (!input.id) input.id = `f${++fieldCounter}`;
  const hintEl = hint ? h('div', {class: 'hint', id: `${input.id}-hint`, text: hint}) : null;
  if (hintEl) input.setAttribute('aria-describedby', hintEl.id);
  return h('div', {class: 'field'}, h('label', { for: input.id, text: label
           }), input, hintEl);
}

// Returns a <select> over [value, label] pairs (or plain values) with `value` selected.
export function select(options, value, attrs = {}) {
  return h(
      'select',
      attrs,
      options.map((o) => {
        const [v, l] = Array.isArray(o) ? o : [o, o];
        return h('option', {value: v, selected: v === value, text: l});
      }),
  );
}

// Returns a definition list of [label, value] pairs (null values skipped); `columns` 2 puts
// two pairs on a row on wide screens.
export function facts(pairs, columns = 1) {
  return h(
      'dl',
      {class: columns === 2 ? 'facts two' : 'facts'},
      pairs.filter((p) => p && p[1] !== null && p[1] !== undefined)
          .map(([k, v]) => [h('dt', {text: k}), h('dd', {}, v)]),
  );
}

const STATUS_KIND = {
  succeeded: 'ok',
  ok: 'ok',
  denied: 'bad',
  revoked: 'muted',
  'not ready': 'bad',
  active: 'ok',
  ready: 'ok',
  failed: 'bad',
  timed_out: 'bad',
  lost: 'bad',
  cancelled: 'warn',
  skipped: 'skipped',
  pin_stale: 'warn',
  exhausted: 'muted',
  disabled: 'muted',
  running: 'run',
  dispatching: 'run',
  starting: 'run',
  queued: 'wait',
  created: 'wait',
  retry_wait: 'wait',
  claimed: 'wait',
  recovery_required: 'bad',
  pending: 'wait',
  approved: 'ok',
  rejected: 'bad',
  expired: 'muted',
  deleted: 'muted',
  delivered: 'ok',
  delivering: 'run',
  dead: 'bad',
  draining: 'warn',
  drained: 'warn',
  offline: 'muted',
  fenced: 'bad',
  never_connected: 'muted',
  open: 'ok',
  older: 'warn',
};

// Returns a coloured status label in the chosen language (the status itself in data-status).
export function badge(status) {
  return h('span', {
    class: `badge ${STATUS_KIND[status] || ''}`.trim(),
    dataset: {status},
    text: t(status),
  });
}

// Returns a link to a hash route, keeping the current project.
export function link(text, path, query = {}, attrs = {}) {
  return h('a', {href: href(path, query), ...attrs, text});
}

// Returns "#<path>?<query>&project=<current>".
export function href(path, query = {}) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(query))
    if (v !== undefined && v !== null && v !== '') q.set(k, v);
  q.set('project', session.project);
  return `#${path}?${q.toString()}`;
}
