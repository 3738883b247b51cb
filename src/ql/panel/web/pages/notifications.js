// Notifications: the project's channels (where messages go; a test message per channel), rules
// (which event of which task goes to which channel) and deliveries (the outbox, newest first,
// with each row's last attempt; a delivered or dead row can be sent again). Admins add and
// delete channels and rules; operators send tests and redeliver. A channel's credentials are
// never typed here: each secret setting names a secret of the project (the Secrets page).

import {del, get, post} from '../lib/api.js';
import {h, replace} from '../lib/dom.js';
import {durationText, shortId, timeEl} from '../lib/format.js';
import {numberText, t, tParts} from '../lib/i18n.js';
import {actionButton, allowed, badge, errorBox, field, link, notice, onSubmit, pageHeader, section, select, table} from '../lib/ui.js';

export const nav = {
  label: t('Notifications'),
  path: '/notifications'
};
export const routes = [{pattern: '/notifications', render}];

// The channel types, with their names in words.
const TYPES = [
  ['webhook', t('Webhook')],
  ['smtp', t('Email (SMTP)')],
  ['feishu', t('Feishu')],
  ['dingtalk', t('DingTalk')],
  ['wecom', t('WeCom')],
  ['telegram', t('Telegram')],
  ['slack', t('Slack')],
  ['discord', t('Discord')],
  ['bark', t('Bark')],
];
const TYPE_NAMES = new Map(TYPES);
// The types that post to one URL (given as it is or as a secret's name).
const URL_TYPES = new Set(['webhook', 'feishu', 'dingtalk', 'wecom', 'slack', 'discord']);
// The events a rule may name in this version, and those that may notify every time.
const EVENTS = [
  'failed', 'timed_out', 'recovered', 'succeeded', 'skipped', 'recovery_required', 'late', 'missing',
  'approval'
];
// The events that take a threshold (after_s).
const AFTER_EVENTS = new Set(['late', 'missing']);
const MODE_EVENTS = new Set(['failed', 'timed_out']);
// The languages of a channel's messages, each in its own language.
const MESSAGE_LANGUAGES = [['en', 'English'], ['zh-CN', '简体中文']];

const channelPath = (name) => `/api/v1/notify/channels/${encodeURIComponent(name)}`;

// Returns a text input for a secret's name (never its value).
function secretNameInput(id) {
  return h('input', {
    id,
    maxlength: 128,
    autocomplete: 'off',
    spellcheck: 'false',
    class: 'mono',
    placeholder: t('SECRET_NAME')
  });
}

function textInput(id, attrs = {}) {
  return h('input', {id, autocomplete: 'off', spellcheck: 'false', ...attrs});
}

// Returns where a channel sends, in words: its URL, the secret holding it, the chat or the
// mail server and recipients.
function destination(c) {
  const cfg = c.config || {};
  const secret = (name) =>
      h('span', {class: 'secret-ref'}, tParts('secret {name}', {name: h('code', {text: name})}));
  if (cfg.url) return h('code', {class: 'notify-url', title: cfg.url, text: cfg.url});
  if (cfg.url_secret) return secret(cfg.url_secret);
  if (c.type === 'telegram') return t('chat {id}', {id: cfg.chat_id ?? '—'});
  if (c.type === 'bark') return secret(cfg.device_key_secret);
  if (c.type === 'smtp') {
    const to = (cfg.to || []).join(', ');
    const host = cfg.port ? `${cfg.host}:${cfg.port}` : cfg.host;
    return h('span', {title: to}, h('code', {text: host}), ` → ${to}`);
  }
  return '—';
}

// Returns a rule's mode in words.
function modeText(r) {
  if (r.mode === 'change') return t('when it changes');
  if (r.min_interval_s > 0)
    return t(
        'every time, at most once per {interval}',
        {interval: t('{n} s', {n: numberText(r.min_interval_s)})});
  return t('every time');
}

// Returns a delivery's status as a badge: a pending row is queued, or waiting to retry after a
// failed attempt (the API's status stays in data-status and the title).
function deliveryBadge(d) {
  const shown = d.status === 'pending' ? (d.attempts > 0 ? 'retry_wait' : 'queued') : d.status;
  const el = badge(shown);
  el.dataset.status = d.status;
  el.title = d.status;
  return el;
}

async function render(ctx) {
  ctx.title(t('Notifications'));
  const errors = errorBox();
  const saved = h('div', {id: 'notify-saved', 'aria-live': 'polite'});
  const say = (text) => replace(saved, notice(text));
  let channels = [];
  let deliveries = [];

  // Channels ------------------------------------------------------------------------------
  const channelTable = table(
      [
        {label: t('Name'), cell: (c) => h('code', {class: 'channel-name', text: c.name})},
        {label: t('Type'), cell: (c) => TYPE_NAMES.get(c.type) || c.type},
        {label: t('Destination'), class: 'clip', cell: destination},
        {label: t('Created'), class: 'wide', cell: (c) => timeEl(c.created_at)},
        {
          label: '',
          class: 'row-actions',
          cell: (c) =>
              [actionButton(
                   t('Send test'), 'operator',
                   async () => {
                     const d = await post(`${channelPath(c.name)}/test`, {});
                     say(
                         t('Test message to {channel} queued as delivery {id}.',
                           {channel: c.name, id: shortId(d.id)}));
                     await loadDeliveries();
                   },
                   {errors}),
               actionButton(
                   t('Delete'), 'admin',
                   async () => {
                     await del(channelPath(c.name));
                     say(t('Channel {name} deleted, with its rules.', {name: c.name}));
                     await Promise.all([loadChannels(), loadRules()]);
                   },
                   {errors, kind: 'danger', confirm: t('Confirm delete')})],
        },
      ],
      null,
      t('No channel yet.'),
  );
  channelTable.id = 'notify-channels';
  channelTable.classList.add('notify-table');

  // Rules ---------------------------------------------------------------------------------
  const ruleTable = table(
      [
        {
          label: t('Event'),
          cell: (r) => h('span', {class: 'event', dataset: {event: r.event}, text: t(r.event)})
        },
        {
          label: t('Task'),
          cell: (r) => r.task_id ? link(r.task_name || shortId(r.task_id), `/tasks/${r.task_id}`) :
                                   h('span', {class: 'muted', text: t('every task')}),
        },
        {
          label: t('Channel'),
          cell: (r) => r.channel ? h('code', {text: r.channel}) :
                                   h('span', {class: 'muted', text: t('(deleted)')}),
        },
        {label: t('Mode'), cell: modeText},
        {label: t('Created'), class: 'wide', cell: (r) => timeEl(r.created_at)},
        {
          label: '',
          class: 'row-actions',
          cell: (r) => actionButton(
              t('Delete'), 'admin',
              async () => {
                await del(`/api/v1/notify/rules/${r.id}`);
                say(t('Rule deleted.'));
                await loadRules();
              },
              {errors, kind: 'danger', confirm: t('Confirm delete')}),
        },
      ],
      null,
      t('No rule yet: nothing is sent for runs.'),
  );
  ruleTable.id = 'notify-rules';
  ruleTable.classList.add('notify-table');

  // Deliveries ----------------------------------------------------------------------------
  const failedOnly = h('input', {type: 'checkbox', id: 'notify-failed-only'});
  const deliveryTable = table(
      [
        {label: t('Time'), cell: (d) => timeEl(d.created_at)},
        {
          label: t('Channel'),
          class: 'wide',
          cell: (d) => d.channel ? h('code', {text: d.channel}) : '—'
        },
        {label: t('Event'), cell: (d) => t(d.event)},
        {
          label: t('Task'),
          cell: (d) =>
              d.task_id ? link(d.task_name || shortId(d.task_id), `/tasks/${d.task_id}`) : '—',
        },
        {
          label: t('Run'),
          class: 'wide',
          cell: (d) => d.run_id ? link(
                                      shortId(d.run_id), `/runs/${d.run_id}`, {},
                                      {class: 'mono run-link', title: d.run_id}) :
                                  '—',
        },
        {label: t('Status'), cell: deliveryBadge},
        {label: t('Attempts'), class: 'num wide', cell: (d) => String(d.attempts)},
        {
          label: t('Code'),
          class: 'num wide',
          cell: (d) => d.last_status_code == null ? '—' : String(d.last_status_code)
        },
        {
          label: t('Latency'),
          class: 'num wide',
          cell: (d) => d.last_latency_ms == null ? '—' : durationText(d.last_latency_ms),
        },
        {
          label: t('Error'),
          class: 'clip',
          cell: (d) => d.last_error ?
              h('span', {class: 'delivery-error', title: d.last_error, text: d.last_error}) :
              '—',
        },
        {
          label: '',
          class: 'row-actions',
          cell: (d) => d.status === 'delivered' || d.status === 'dead' ?
              actionButton(
                  t('Redeliver'), 'operator',
                  async () => {
                    await post(`/api/v1/notify/deliveries/${d.id}/redeliver`, {});
                    say(t('Delivery {id} queued again.', {id: shortId(d.id)}));
                    await loadDeliveries();
                  },
                  {errors}) :
              null,
        },
      ],
      null,
      t('Nothing sent yet.'),
  );
  deliveryTable.id = 'notify-deliveries';
  deliveryTable.classList.add('notify-table');
  failedOnly.addEventListener('change', () => {
    deliveryTable.setRows(null);
    loadDeliveries().catch(failed(deliveryTable));
  });

  // Loading ---------------------------------------------------------------------------------
  let onChannels = () => {};
  const loadChannels = async () => {
    channels = (await get('/api/v1/notify/channels', {}, ctx.signal)).items || [];
    channelTable.setRows(channels);
    onChannels();
  };
  const loadRules = async () => {
    ruleTable.setRows((await get('/api/v1/notify/rules', {}, ctx.signal)).items || []);
  };
  const loadDeliveries = async () => {
    const query = {limit: 100, failed: failedOnly.checked ? 'true' : ''};
    deliveries = (await get('/api/v1/notify/deliveries', query, ctx.signal)).items || [];
    deliveryTable.setRows(deliveries);
    const empty = deliveryTable.querySelector('td.empty');
    if (empty && failedOnly.checked) empty.textContent = t('No failed delivery.');
  };
  const failed = (tbl) => (err) => {
    if (err.name === 'AbortError') return;
    errors.show(err);
    tbl.setFailed();
  };

  // Forms (admins) --------------------------------------------------------------------------
  let channelForm = null;
  let ruleForm = null;
  if (allowed('admin')) {
    channelForm = channelFormOf(async (name) => {
      say(t('Channel {name} added.', {name}));
      await loadChannels();
    });
    const rule = ruleFormOf(async () => {
      say(t('Rule added.'));
      await loadRules();
    });
    ruleForm = rule.form;
    onChannels = () => rule.setChannels(channels);
    get('/api/v1/tasks', {limit: 500}, ctx.signal)
        .then((r) => rule.setTasks(r.items || []))
        .catch((err) => {
          if (err.name !== 'AbortError') errors.show(err);
        });
  }

  replace(
      ctx.main,
      pageHeader(t('Notifications')),
      errors,
      saved,
      h('p', {
        class: 'muted small',
        text: t(
            'A rule sends an event of a task (or of every task) to a channel. Each message is sent at least once, retried with backoff, and carries its delivery id as Idempotency-Key so a receiver can drop repeats.'),
      }),
      section(t('Channels'), channelTable, channelForm),
      section(t('Rules'), ruleTable, ruleForm),
      section(
          t('Deliveries'),
          h('div', {class: 'notify-toolbar'},
            h('div', {class: 'field check'}, failedOnly,
              h('label',
                { for: failedOnly.id, text: t('Failed only')
                })),
            h('button', {
              type: 'button',
              class: 'btn',
              id: 'notify-refresh',
              text: t('Refresh'),
              onclick: () => loadDeliveries().catch(failed(deliveryTable)),
            })),
          deliveryTable),
  );
  await Promise.all([
    loadChannels().catch(failed(channelTable)),
    loadRules().catch(failed(ruleTable)),
    loadDeliveries().catch(failed(deliveryTable)),
  ]);
  // While a row waits or is being sent, its outcome is read again every 2 s.
  ctx.every(2000, () => {
    if (!deliveries.some((d) => d.status === 'pending' || d.status === 'delivering')) return;
    loadDeliveries().catch((err) => {
      if (err.name !== 'AbortError') errors.show(err);
    });
  });
}

// Returns the "Add channel" form: name, type, the settings of that type (only its own fields
// show) and the messages' language. `added(name)` runs after the server took it.
function channelFormOf(added) {
  const name = textInput('notify-channel-name', {
    required: true,
    maxlength: 64,
    class: 'mono',
    placeholder: t('ops-hook'),
  });
  const type = select(TYPES, 'webhook', {id: 'notify-channel-type'});
  const language = select(MESSAGE_LANGUAGES, 'en', {id: 'notify-channel-language'});
  const url = textInput(
      'notify-url',
      {type: 'url', maxlength: 2048, class: 'mono', placeholder: 'https://hooks.example.com/ql'});
  const urlSecret = secretNameInput('notify-url-secret');
  const signingSecret = secretNameInput('notify-signing-secret');
  const tokenSecret = secretNameInput('notify-token-secret');
  const chatId = textInput('notify-chat-id', {maxlength: 64, class: 'mono'});
  const deviceKeySecret = secretNameInput('notify-device-key-secret');
  const host = textInput('notify-smtp-host', {maxlength: 255, placeholder: 'smtp.example.com'});
  const port =
      textInput('notify-smtp-port', {type: 'number', min: 1, max: 65535, placeholder: '587'});
  const security = select(['starttls', 'tls', 'none'], 'starttls', {id: 'notify-smtp-security'});
  const username = textInput('notify-smtp-username', {maxlength: 255});
  const passwordSecret = secretNameInput('notify-smtp-password-secret');
  const from = textInput('notify-smtp-from', {maxlength: 255, placeholder: 'ql@example.com'});
  const to = textInput(
      'notify-smtp-to', {maxlength: 4096, placeholder: 'ops@example.com, oncall@example.com'});
  const secretHint = t('The name of a secret of this project (see Secrets), never its value.');

  // Each group shows for the types in its set.
  const groups = [
    [
      URL_TYPES,
      h('div', {class: 'row'},
        field(
            t('URL'), url,
            t('http or https. Or leave it empty and name a secret that holds the URL.')),
        field(t('URL secret'), urlSecret, secretHint))
    ],
    [
      new Set(['webhook', 'feishu', 'dingtalk']),
      h('div', {class: 'row'},
        field(
            t('Signing secret (optional)'), signingSecret,
            t('A secret name. Webhook requests carry X-QL-Signature; Feishu and DingTalk get their signature.')))
    ],
    [
      new Set(['telegram']),
      h('div', {class: 'row'}, field(t('Bot token secret'), tokenSecret, secretHint),
        field(t('Chat id'), chatId))
    ],
    [
      new Set(['bark']),
      h('div', {class: 'row'}, field(t('Device key secret'), deviceKeySecret, secretHint))
    ],
    [
      new Set(['smtp']),
      h('div', {class: 'smtp-fields'},
        h('div', {class: 'row'}, field(t('Host'), host),
          field(t('Port'), port, t('Empty: 587 for starttls, 465 for tls, 25 for none.')),
          field(t('Security'), security)),
        h('div', {class: 'row'}, field(t('Username (optional)'), username),
          field(
              t('Password secret'), passwordSecret, t('Required with a username. ') + secretHint)),
        h('div', {class: 'row'}, field(t('From'), from),
          field(t('To'), to, t('Addresses separated by commas (at most 50).'))))
    ],
  ];
  const showGroups = () => {
    for (const [types, el] of groups) el.hidden = !types.has(type.value);
  };
  type.addEventListener('change', showGroups);
  showGroups();

  const errors = errorBox();
  const form = h(
      'form', {class: 'form inline notify-form', id: 'notify-channel-form'},
      h('h3', {text: t('Add channel')}), errors,
      h('div', {class: 'row'},
        field(
            t('Name'), name,
            t('Letters, digits, _ . - (at most 64), starting with a letter or digit.')),
        field(t('Type'), type), field(t('Message language'), language)),
      groups.map(([, el]) => el),
      h('button',
        {type: 'submit', class: 'btn primary', dataset: {needs: 'admin'}, text: t('Add channel')}));
  return onSubmit(form, errors, async () => {
    const kind = type.value;
    const config = {language: language.value};
    const put = (key, input) => {
      const v = input.value.trim();
      if (v) config[key] = v;
    };
    if (URL_TYPES.has(kind)) {
      put('url', url);
      put('url_secret', urlSecret);
    }
    if (kind === 'webhook' || kind === 'feishu' || kind === 'dingtalk') {
      put('signing_secret', signingSecret);
    }
    if (kind === 'telegram') {
      put('token_secret', tokenSecret);
      put('chat_id', chatId);
    }
    if (kind === 'bark') put('device_key_secret', deviceKeySecret);
    if (kind === 'smtp') {
      put('host', host);
      if (port.value.trim()) config.port = Number(port.value);
      config.security = security.value;
      put('username', username);
      put('password_secret', passwordSecret);
      put('from', from);
      config.to = to.value.split(',').map((s) => s.trim()).filter(Boolean);
    }
    const c = await post('/api/v1/notify/channels', {name: name.value.trim(), type: kind, config});
    for (const input
             of [name, url, urlSecret, signingSecret, tokenSecret, chatId, deviceKeySecret, host,
                 port, username, passwordSecret, from, to])
      input.value = '';
    await added(c.name);
  });
}

// Returns the "Add rule" form with setChannels(list) and setTasks(list) to fill its selects.
// `added()` runs after the server took the rule.
function ruleFormOf(added) {
  const channel = select([], '', {id: 'notify-rule-channel', required: true});
  const event = select(EVENTS.map((e) => [e, t(e)]), 'failed', {id: 'notify-rule-event'});
  const task = select([['', t('every task')]], '', {id: 'notify-rule-task'});
  const every = h('input', {type: 'checkbox', id: 'notify-rule-every'});
  const everyField = h('div', {class: 'field check'}, every, h('label', { for: every.id, text: t('Notify every time (otherwise only when it starts failing)')
                       }));
  const after = h('input', {type: 'number', id: 'notify-rule-after', min: 1, max: 43200, value: 10});
  const afterField = field(t('After (minutes)'), after);
  const eventHint = h('div', {class: 'hint', id: 'notify-rule-event-hint'});
  event.setAttribute('aria-describedby', eventHint.id);
  const HINTS = {
    failed: t(
        'When the task starts failing, not again until it succeeds; with "every time", each failure (at most once a minute).'),
    timed_out: t(
        'When the task starts timing out, not again until it succeeds; with "every time", each time-out (at most once a minute).'),
    recovered: t('Once, on the first success after failures.'),
    succeeded: t('Every success, at most once a minute.'),
    skipped: t('Every skipped occurrence, at most once a minute.'),
    recovery_required: t('Every run left needing resolution, at most once a minute.'),
    late: t('A run still queued this long after it was due, or running longer (once per run).'),
    missing: t('No success of the chosen task for this long (once per silence); needs a task.'),
    approval: t('Each approval request (at most once a minute per task) and each decision.'),
  };
  const onEvent = () => {
    everyField.hidden = !MODE_EVENTS.has(event.value);
    afterField.hidden = !AFTER_EVENTS.has(event.value);
    eventHint.textContent = HINTS[event.value] || '';
  };
  event.addEventListener('change', onEvent);
  onEvent();
  const errors = errorBox();
  const submit =
      h('button',
        {type: 'submit', class: 'btn primary', dataset: {needs: 'admin'}, text: t('Add rule')});
  const form =
      h('form', {class: 'form inline notify-form', id: 'notify-rule-form'},
        h('h3', {text: t('Add rule')}), errors,
        h('div', {class: 'row'}, field(t('Channel'), channel),
          h('div', {class: 'field'},
            h('label',
              { for: event.id, text: t('Event')
              }),
            event, eventHint),
          field(t('Task'), task), afterField),
        everyField, submit);
  form.setChannels = (list) => {
    const before = channel.value;
    replace(
        channel,
        list.map((c) => h('option', {value: c.name, selected: c.name === before, text: c.name})));
    if (!list.length) channel.append(h('option', {value: '', text: t('add a channel first')}));
    submit.disabled = !list.length;
  };
  form.setTasks = (list) => {
    const before = task.value;
    replace(
        task, h('option', {value: '', text: t('every task')}),
        list.map((r) => h('option', {value: r.id, selected: r.id === before, text: r.name})));
  };
  onSubmit(form, errors, async () => {
    const body = {channel: channel.value, event: event.value};
    if (task.value) body.task = task.value;
    if (MODE_EVENTS.has(event.value)) body.mode = every.checked ? 'every' : 'change';
    if (AFTER_EVENTS.has(event.value)) body.after_s = Math.round(Number(after.value) * 60);
    await post('/api/v1/notify/rules', body);
    every.checked = false;
    await added();
  });
  return {form, setChannels: form.setChannels, setTasks: form.setTasks};
}
