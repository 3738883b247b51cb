// Scripts: the project's script library. The list (name, latest version, kind, status,
// updated); a script with its files, the chosen file in an editor with line numbers, its
// history, the tasks that pin it and Delete; a new script from a name, a file name and its text
// (or an uploaded file); and the line diff of two versions. Saving uploads the text as a blob
// and pushes it as the next version over the version the page showed (`expected_latest`), so
// a push made meanwhile is refused with a clear message instead of being overwritten.
// Viewers read; admins write.

import {del, get, getBytes, pager, post, uploadBlob} from '../lib/api.js';
import {diffLines, foldUnchanged} from '../lib/diff.js';
import {h, replace} from '../lib/dom.js';
import {codeEditor} from '../lib/editor.js';
import {shortId, timeEl} from '../lib/format.js';
import {numberText, t} from '../lib/i18n.js';
import {principalNames} from '../lib/lookup.js';
import {actionButton, actionLink, allowed, badge, errorBox, facts, field, href, link, notice, onSubmit, pageHeader, section, select, table} from '../lib/ui.js';

export const nav = {
  label: t('Scripts'),
  path: '/scripts'
};
export const routes = [
  {pattern: '/scripts', render: renderList},
  {pattern: '/scripts/new', render: renderNew},
  {pattern: '/scripts/:name', render: renderScript},
  {pattern: '/scripts/:name/diff', render: renderDiff},
];

const api = (name) => `/api/v1/scripts/${encodeURIComponent(name)}`;
const page = (name) => `/scripts/${encodeURIComponent(name)}`;
// The script names the server takes (docs/api.md), as an <input pattern> (the v flag).
const NAME_PATTERN = '[A-Za-z0-9_][A-Za-z0-9_.\\-]{0,127}';
const decoder = new TextDecoder('utf-8', {fatal: true, ignoreBOM: true});
const encoder = new TextEncoder();

// Returns `bytes` as text, or null when they are not UTF-8 text (a NUL byte counts as binary).
function textOf(bytes) {
  if (bytes.includes(0)) return null;
  try {
    return decoder.decode(bytes);
  } catch {
    return null;
  }
}

// Returns the bytes to save for the editor's `text`. A textarea holds line breaks as \n only, so
// a file that had \r\n line breaks gets them back.
function bytesOf(text, crlf) {
  return encoder.encode(crlf ? text.replace(/\n/g, '\r\n') : text);
}

// Returns a byte count in words ("812 B", "3.4 KiB", "1.2 MiB").
function sizeText(n) {
  if (n < 1024) return t('{n} B', {n: numberText(n)});
  if (n < 1024 * 1024) return t('{n} KiB', {n: numberText(n / 1024, {maximumFractionDigits: 1})});
  return t('{n} MiB', {n: numberText(n / 1048576, {maximumFractionDigits: 1})});
}

// Pushes `body` as the next version of script `name`; a push made meanwhile (409
// script_version_conflict) becomes an error saying so in words, whatever the language.
async function push(name, body, shown) {
  try {
    return await post(`${api(name)}/versions`, body);
  } catch (err) {
    if (err.code !== 'script_version_conflict') throw err;
    const conflict = new Error(
        shown ?
            t('Not saved: someone pushed another version of {name} after version {shown}, which this page shows. Copy your text, reload the page and make your change again.',
              {name, shown}) :
            t('Not saved: a script named {name} already exists. Open it to push a new version.',
              {name}));
    conflict.code = err.code;
    throw conflict;
  }
}

// A file's content on its way to being saved: the editor's text, or the bytes of an uploaded
// file that is not text (shown as a note instead). `el` holds the editor, the note and the
// upload control (admins).
function contentEditor({text, crlf = false, editable, label, onUpload}) {
  const editor = codeEditor(text ?? '', {id: 'script-editor', 'aria-label': label});
  editor.area.readOnly = !editable || text === null;
  const note = h('div', {id: 'script-content-note', 'aria-live': 'polite'});
  if (text === null) replace(note, notice(t('This file is not text: it is not shown.'), 'warn'));
  let uploaded = null;  // {name, bytes} of a file that is not text
  let edited = false;   // typed into, or given an uploaded text
  editor.area.addEventListener('input', () => (edited = true));
  let upload = null;
  if (editable) {
    upload = h('input', {type: 'file', id: 'script-upload', class: 'file-input'});
    upload.addEventListener('change', async () => {
      const file = upload.files[0];
      if (!file) return;
      const bytes = new Uint8Array(await file.arrayBuffer());
      const asText = textOf(bytes);
      if (asText === null) {
        uploaded = {name: file.name, bytes};
        editor.setText('');
        editor.area.readOnly = true;
        replace(
            note,
            notice(
                t('{file} is not text ({size}): saving uploads it as it is.',
                  {file: file.name, size: sizeText(bytes.length)}),
                'warn'));
      } else {
        uploaded = null;
        edited = true;
        crlf = asText.includes('\r\n');
        editor.setText(asText);
        editor.area.readOnly = false;
        replace(
            note,
            notice(t('{file} is in the editor: save to make it a version.', {file: file.name})));
      }
      onUpload?.(file.name);
      upload.value = '';
    });
  }
  const el =
      h('div', {class: 'script-content'}, note, editor,
        upload ? field(
                     t('Upload a file'), upload,
                     t('Its bytes replace the text above; nothing is saved until you save.')) :
                 null);
  el.editor = editor;
  // Returns the bytes to save, or null when nothing changed since `text`.
  el.bytes = () => {
    if (uploaded) return uploaded.bytes;
    if (!edited) return null;
    if (text !== null && editor.area.value === text.replace(/\r\n?/g, '\n')) return null;
    return bytesOf(editor.area.value, crlf);
  };
  return el;
}

async function renderList(ctx) {
  ctx.title(t('Scripts'));
  const errors = errorBox();
  // The kind is in each script's version: a placeholder per row, filled as the answers come.
  const kinds = new Map();
  const kindCell = (s) => {
    if (!kinds.has(s.name)) kinds.set(s.name, h('span', {class: 'muted', text: '…'}));
    return kinds.get(s.name);
  };
  const tbl = table(
      [
        {
          label: t('Name'),
          cell: (s) => link(
              s.name, page(s.name), s.status === 'deleted' ? {version: s.latest_version} : {},
              {class: 'mono script-link'}),
        },
        {label: t('Latest version'), class: 'num', cell: (s) => String(s.latest_version)},
        {label: t('Kind'), class: 'nowrap', cell: kindCell},
        {label: t('Status'), cell: (s) => badge(s.status)},
        {label: t('Created'), class: 'wide', cell: (s) => timeEl(s.created_at)},
        {label: t('Updated'), cell: (s) => timeEl(s.updated_at)},
      ],
      null, t('No script yet.'));
  replace(
      ctx.main,
      pageHeader(t('Scripts'), actionLink(t('New script'), 'admin', href('/scripts/new'))), errors,
      ctx.query.deleted ? notice(t('Script {name} deleted.', {name: ctx.query.deleted})) : null,
      h('p', {
        class: 'muted small',
        text: t(
            'A task runs a script by naming it in its command, pinned to one version: a new version changes no task until the task is published again. ql script push publishes from the command line.')
      }),
      section(null, tbl));
  let items;
  try {
    items = (await get('/api/v1/scripts', {}, ctx.signal)).items || [];
  } catch (err) {
    if (err.name === 'AbortError') throw err;
    errors.show(err);
    tbl.setFailed();
    return;
  }
  tbl.setRows(items);
  // A few at a time: a large library does not send hundreds of requests at once.
  const queue = [...items];
  const next = async () => {
    for (let s = queue.shift(); s; s = queue.shift()) {
      const cell = kindCell(s);
      try {
        const one = await get(api(s.name), {version: s.latest_version}, ctx.signal);
        cell.className = '';
        cell.textContent = t(one.version.kind);
      } catch (err) {
        if (err.name === 'AbortError') return;
        cell.textContent = '—';
      }
    }
  };
  await Promise.all(Array.from({length: 4}, next));
}

async function renderNew(ctx) {
  ctx.title(t('New script'));
  if (!allowed('admin')) {
    replace(
        ctx.main, pageHeader(t('New script')),
        notice(t('Only a project admin can publish scripts.'), 'warn'));
    return;
  }
  const errors = errorBox();
  const name = h('input', {
    id: 'script-name',
    required: true,
    maxlength: 128,
    pattern: NAME_PATTERN,
    autocomplete: 'off',
    spellcheck: 'false',
    class: 'mono',
    placeholder: 'backup',
  });
  const file = h('input', {
    id: 'script-file',
    required: true,
    maxlength: 255,
    autocomplete: 'off',
    spellcheck: 'false',
    class: 'mono',
    placeholder: 'backup.sh',
  });
  const content = contentEditor({
    text: '',
    editable: true,
    label: t('Content'),
    onUpload: (fileName) => {
      if (!file.value) file.value = fileName;
      if (!name.value)
        name.value = fileName.replace(/\.[^.]*$/, '').replace(/[^A-Za-z0-9_.-]/g, '_');
    },
  });
  const form =
      h('form', {class: 'form script-form', id: 'script-form'}, errors,
        h('div', {class: 'row'},
          field(
              t('Script name'), name,
              t('Letters, digits, _ . - (at most 128), not starting with . or -.')),
          field(
              t('File name'), file,
              t('Its extension tells the interpreter: .sh, .bash, .py or .js.'))),
        field(t('Content'), content),
        h('div', {class: 'actions'}, h('button', {
            type: 'submit',
            class: 'btn primary',
            id: 'script-create',
            dataset: {needs: 'admin'},
            text: t('Create script')
          }),
          link(t('Cancel'), '/scripts', {}, {class: 'btn'})));
  onSubmit(form, errors, async () => {
    const scriptName = name.value.trim();
    const bytes = content.bytes() ?? new Uint8Array(0);
    const blob = await uploadBlob(bytes, ctx.signal);
    const pushed = await push(
        scriptName, {
          kind: 'file',
          files:
              [{path: file.value.trim(), digest: blob.digest, size: blob.size, executable: false}],
          expected_latest: 0,
        },
        0);
    ctx.navigate(page(scriptName), {saved: pushed.version});
  });
  replace(ctx.main, pageHeader(t('New script')), form);
  name.focus();
}

async function renderScript(ctx) {
  const name = ctx.params.name;
  ctx.title(name);
  const errors = errorBox();
  const [found, history, names] = await Promise.all([
    get(api(name), {version: ctx.query.version}, ctx.signal),
    get(`${api(name)}/versions`, {}, ctx.signal),
    principalNames(ctx.signal),
  ]);
  const v = found.version;
  const latest = found.latest_version;
  const versions = history.items || [];
  const path = ctx.query.path || v.entry;
  const file = (v.files || []).find((f) => f.path === path);
  if (!file)
    throw Object.assign(
        new Error(t('Version {version} has no file {path}.', {version: v.version, path})),
        {code: 'script_file_not_found'});
  const admin = allowed('admin');
  const by = (id) => (id ? names.get(id) || shortId(id) : '—');
  const here = (query) => ({version: ctx.query.version, path: ctx.query.path, ...query});

  // The file in the editor.
  const {bytes} = await getBytes(`${api(name)}/content`, {version: v.version, path}, ctx.signal);
  const text = textOf(bytes);
  const content = contentEditor({
    text,
    crlf: text !== null && text.includes('\r\n'),
    editable: admin,
    label: t('Content of {path}', {path}),
  });
  const saveButton = actionButton(t('Save'), 'admin', async () => {
    const changed = content.bytes();
    if (!changed) {
      replace(
          saved,
          notice(t('Nothing to save: the text is as in version {version}.', {version: v.version})));
      return;
    }
    const blob = await uploadBlob(changed, ctx.signal);
    const files = v.files.map((f) => ({
                                path: f.path,
                                digest: f.path === path ? blob.digest : f.digest,
                                size: f.path === path ? blob.size : f.size,
                                executable: f.executable,
                              }));
    const body = {kind: v.kind, files, expected_latest: latest};
    if (v.kind === 'tree') body.entry = v.entry;
    const pushed = await push(name, body, latest);
    if (pushed.unchanged) {
      replace(
          saved,
          notice(t(
              'Nothing to save: the text is as in version {version}.', {version: pushed.version})));
      return;
    }
    ctx.navigate(
        page(name), v.kind === 'tree' ? {saved: pushed.version, path} : {saved: pushed.version});
  }, {errors, kind: 'primary'});
  if (saveButton) saveButton.id = 'script-save';
  const saved =
      h('div', {id: 'script-saved', 'aria-live': 'polite'},
        ctx.query.saved ? notice(t('Saved as version {version}.', {version: ctx.query.saved})) :
                          null);

  const versionSel = select(
      versions.map(
          (x) =>
              [String(x.version),
               x.version === latest ? t('version {n} (latest)', {n: x.version}) :
                                      t('version {n}', {n: x.version})]),
      String(v.version), {id: 'script-version', 'aria-label': t('Version')});
  versionSel.addEventListener(
      'change', () => ctx.navigate(page(name), {version: versionSel.value}));

  const filesTable =
      table(
          [
            {
              label: t('File'),
              cell: (f) => h(
                  'span', {},
                  f.path === path ? h('strong', {class: 'mono', text: f.path}) :
                                    link(f.path, page(name), here({path: f.path}), {class: 'mono'}),
                  f.path === v.entry ? [' ', h('span', {class: 'chip', text: t('entry')})] : null),
            },
            {label: t('Size'), class: 'num', cell: (f) => sizeText(f.size)},
            {
              label: t('Executable'),
              class: 'wide',
              cell: (f) => (f.executable ? t('yes') : t('no'))
            },
            {
              label: t('Digest'),
              class: 'wide',
              cell: (f) => h('code', {title: f.digest, text: f.digest.slice(0, 12)})
            },
          ],
          v.files || []);

  const historyTable = table(
      [
        {
          label: t('Version'),
          class: 'num',
          cell: (x) =>
              link(String(x.version), page(name), {version: x.version}, {class: 'version-link'}),
        },
        {label: t('Kind'), cell: (x) => t(x.kind)},
        {label: t('Size'), class: 'num wide', cell: (x) => sizeText(x.size)},
        {label: t('Entry'), class: 'wide', cell: (x) => h('code', {text: x.entry})},
        {label: t('By'), class: 'wide', cell: (x) => by(x.created_by)},
        {label: t('Created'), cell: (x) => timeEl(x.created_at)},
        {
          label: '',
          class: 'row-actions',
          cell: (x) => {
            const older = versions.find((o) => o.version < x.version);
            return older ? link(
                               t('Diff with version {n}', {n: older.version}), `${page(name)}/diff`,
                               {from: older.version, to: x.version}, {class: 'diff-link'}) :
                           null;
          },
        },
      ],
      versions, t('No version.'));
  const from = select(
      versions.map((x) => [String(x.version), String(x.version)]),
      String(versions[1]?.version ?? v.version), {id: 'diff-from'});
  const to = select(
      versions.map((x) => [String(x.version), String(x.version)]),
      String(versions[0]?.version ?? v.version), {id: 'diff-to'});
  const diffForm = diffChooser(ctx, name, from, to);

  const usedBy = table(
      [
        {label: t('Task'), cell: (u) => link(u.name, `/tasks/${u.id}`, {}, {class: 'task-link'})},
        {
          label: t('Pinned version'),
          cell: (u) => h(
              'span', {class: 'pinned'}, link(String(u.version), page(name), {version: u.version}),
              u.version === latest ? null : [' ', badge('older')]),
        },
        {label: t('Enabled'), class: 'wide', cell: (u) => (u.enabled ? t('yes') : t('no'))},
      ],
      null, t('No task runs this script.'));

  const deleteButton =
      found.status === 'deleted' ? null : actionButton(t('Delete script'), 'admin', async () => {
        await del(api(name));
        ctx.navigate('/scripts', {deleted: name});
      }, {errors, kind: 'danger', confirm: t('Confirm delete')});

  replace(
      ctx.main,
      pageHeader(
          name, versionSel,
          found.status === 'deleted' ?
              null :
              actionLink(t('New task running it'), 'admin', href('/tasks/new', {script: name})),
          deleteButton),
      errors,
      saved,
      found.status === 'deleted' ?
          notice(
              t('This script is deleted; its versions stay readable until retention purges them. Saving makes it active again.'),
              'warn') :
          null,
      v.version !== latest ?
          notice(t(
              'This is version {version}; the latest is {latest}. Saving makes version {next} from this text.',
              {version: v.version, latest, next: latest + 1})) :
          null,
      section(
          null,
          facts(
              [
                [t('Status'), h('span', {id: 'script-status'}, badge(found.status))],
                [t('Version'), h('span', {id: 'script-shown-version'}, String(v.version))],
                [t('Kind'), t(v.kind)],
                [t('Entry'), h('code', {text: v.entry})],
                [t('Size'), sizeText(v.size)],
                [t('Pushed by'), by(v.created_by)],
                [t('Pushed'), timeEl(v.created_at)],
                [t('Digest'), h('code', {class: 'wrap', text: v.digest})],
              ],
              2)),
      section(
          v.kind === 'tree' ? t('Files') : null, v.kind === 'tree' ? filesTable : null,
          h('div', {class: 'editor-head'}, h('h2', {class: 'mono', text: path}),
            h('span', {class: 'muted small', text: sizeText(file.size)}), saveButton),
          content),
      section(
          t('Used by'), h('p', {
            class: 'muted small',
            text: t('Tasks whose command runs this script, and the version each is pinned to.')
          }),
          usedBy),
      section(t('History'), historyTable, versions.length > 1 ? diffForm : null),
  );

  // The tasks that pin this script: every task of the project, read page by page.
  try {
    const tasks = pager('/api/v1/tasks', {}, 200);
    const users = [];
    for (let pages = 0; pages < 50 && !tasks.done; pages++) {
      for (const task of await tasks.next(ctx.signal)) {
        const command = task.spec?.command;
        if (command?.kind === 'script' && command.script === name) {
          users.push(
              {id: task.id, name: task.name, version: command.version, enabled: task.enabled});
        }
      }
    }
    usedBy.setRows(users);
  } catch (err) {
    if (err.name === 'AbortError') throw err;
    errors.show(err);
    usedBy.setFailed();
  }
}

// Returns a form that opens the diff of the versions chosen in the selects `from` and `to`.
function diffChooser(ctx, name, from, to) {
  const errors = errorBox();
  return onSubmit(
      h('form', {class: 'form inline', id: 'diff-form'}, errors,
        h('div', {class: 'row'}, field(t('From version'), from), field(t('To version'), to)),
        h('button', {type: 'submit', class: 'btn', id: 'diff-show', text: t('Show the diff')})),
      errors, async () => ctx.navigate(`${page(name)}/diff`, {from: from.value, to: to.value}));
}

// Returns the files of two versions paired by path ({path, a, b}; a or b null when the file is
// only in one). Two one-file versions pair their files whatever their names.
function pairFiles(before, after) {
  if (before.kind === 'file' && after.kind === 'file') {
    const [a] = before.files;
    const [b] = after.files;
    return [{path: a.path === b.path ? a.path : `${a.path} → ${b.path}`, a, b}];
  }
  const paths = [...new Set([...before.files, ...after.files].map((f) => f.path))].sort();
  return paths.map((p) => ({
                     path: p,
                     a: before.files.find((f) => f.path === p) || null,
                     b: after.files.find((f) => f.path === p) || null,
                   }));
}

async function renderDiff(ctx) {
  const name = ctx.params.name;
  ctx.title(t('Diff of {name}', {name}));
  const [history, before, after] = await Promise.all([
    get(`${api(name)}/versions`, {}, ctx.signal),
    get(api(name), {version: ctx.query.from}, ctx.signal),
    get(api(name), {version: ctx.query.to}, ctx.signal),
  ]);
  const versions = history.items || [];
  const a = before.version;
  const b = after.version;
  const from = select(
      versions.map((x) => [String(x.version), String(x.version)]), String(a.version),
      {id: 'diff-from'});
  const to = select(
      versions.map((x) => [String(x.version), String(x.version)]), String(b.version),
      {id: 'diff-to'});
  const choose = diffChooser(ctx, name, from, to);
  const out = h('div', {id: 'script-diff'}, h('p', {class: 'muted', text: t('Loading…')}));
  replace(
      ctx.main,
      h('div', {class: 'page-head'},
        h('h1', {}, t('Diff of {name}', {name}), ' ',
          h('span',
            {class: 'muted', text: t('version {from} → {to}', {from: a.version, to: b.version})})),
        h('div', {class: 'actions'},
          link(t('Back to the script'), page(name), {}, {class: 'btn'}))),
      section(null, choose), out);

  const content = async (version, f) => {
    const {bytes} = await getBytes(`${api(name)}/content`, {version, path: f.path}, ctx.signal);
    return textOf(bytes);
  };
  const blocks = [];
  let unchanged = 0;
  for (const pair of pairFiles(a, b)) {
    if (pair.a && pair.b && pair.a.digest === pair.b.digest) {
      unchanged++;
      continue;
    }
    const [textA, textB] = await Promise.all([
      pair.a ? content(a.version, pair.a) : '',
      pair.b ? content(b.version, pair.b) : '',
    ]);
    const state = !pair.a ? t('added') : !pair.b ? t('removed') : t('changed');
    if (textA === null || textB === null) {
      blocks.push(diffBlock(
          pair.path, state, null,
          t('Not text: {a} → {b}.',
            {a: pair.a ? sizeText(pair.a.size) : '—', b: pair.b ? sizeText(pair.b.size) : '—'})));
      continue;
    }
    blocks.push(diffBlock(pair.path, state, diffLines(textA, textB)));
  }
  replace(
      out, blocks.length ? null : notice(t('The two versions have the same files.')), blocks,
      unchanged && blocks.length ?
          h('p', {class: 'muted small', text: t('Unchanged files: {n}.', {n: unchanged})}) :
          null);
}

// Returns one file's diff: its path, what happened to it, lines added and removed, and the
// lines (kept ones far from a change folded); `note` instead of lines for a file not text.
function diffBlock(path, state, lines, note) {
  const added = lines ? lines.filter((l) => l.op === '+').length : 0;
  const removed = lines ? lines.filter((l) => l.op === '-').length : 0;
  const rows = lines ? foldUnchanged(lines).map((l) => {
    if (l.op === '…') {
      return h(
          'tr', {class: 'diff-fold'},
          h('td', {colspan: 3, text: t('{n} unchanged lines', {n: l.count})}));
    }
    const kind = l.op === '+' ? 'diff-add' : l.op === '-' ? 'diff-del' : 'diff-same';
    return h(
        'tr', {class: kind}, h('td', {class: 'diff-no', text: l.a ?? ''}),
        h('td', {class: 'diff-no', text: l.b ?? ''}),
        h('td', {class: 'diff-text'}, h('span', {class: 'diff-sign', text: l.op}), l.text));
  }) :
                       [];
  return section(
      null,
      h('div', {class: 'diff-head'}, h('h2', {class: 'mono', text: path}),
        h('span', {class: 'muted small', text: state}),
        lines ? h('span', {class: 'diff-count', text: `+${added} −${removed}`}) : null),
      note ? h('p', {class: 'muted', text: note}) : null,
      lines ? h('div', {class: 'table-wrap diff-wrap'},
                h('table', {class: 'diff'}, h('tbody', {}, rows))) :
              null);
}
