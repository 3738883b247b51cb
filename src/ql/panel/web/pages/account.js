// Your account (linked from your name in the header): where you are signed in, with revoke;
// your password; your second factor: set it up (a QR code of the otpauth:// URI and the key
// for typing, a code to confirm, then the ten recovery codes, shown once) or remove it. The
// password form and the set-up are also the screens a restricted session must pass (app.js).

import {get, post} from '../lib/api.js';
import {h, replace} from '../lib/dom.js';
import {shortId, timeEl} from '../lib/format.js';
import {t} from '../lib/i18n.js';
import {qrSvg} from '../lib/qr.js';
import {session} from '../lib/session.js';
import {actionButton, errorBox, facts, field, notice, onSubmit, pageHeader, section, table} from '../lib/ui.js';

export const nav = null;
export const routes = [{pattern: '/account', render}];

const formError = (message) => Object.assign(new Error(message), {code: 'form'});

// Returns the form that changes your own password (current, new, new again), calling
// `onDone` once the server has taken it. `requireCurrent` false lets the current one be empty
// (a principal that has none yet, signed in with a token).
export function passwordForm(onDone, {requireCurrent = true, label = t('Change password')} = {}) {
  const errors = errorBox();
  const current = h('input', {
    type: 'password',
    id: 'password-current',
    autocomplete: 'current-password',
    required: requireCurrent,
  });
  const next = h('input', {
    type: 'password',
    id: 'password-new',
    autocomplete: 'new-password',
    required: true,
  });
  const again = h('input', {
    type: 'password',
    id: 'password-repeat',
    autocomplete: 'new-password',
    required: true,
  });
  const form = h(
      'form', {class: 'form', id: 'password-form'}, errors,
      field(
          t('Current password'), current,
          requireCurrent ? null : t('Leave it empty if you have none yet.')),
      h('div', {class: 'row'},
        field(
            t('New password'), next, t('At least 12 characters; a phrase is easiest to remember.')),
        field(t('New password again'), again)),
      h('button', {type: 'submit', class: 'btn primary', text: label}));
  return onSubmit(form, errors, async () => {
    if (next.value !== again.value) throw formError(t('the two new passwords differ'));
    await post('/api/v1/password', {current_password: current.value, new_password: next.value});
    current.value = '';
    next.value = '';
    again.value = '';
    await onDone();
  });
}

// Returns the set-up of a second factor: a button that enrols, then the QR code, the key and
// the confirming code, then the recovery codes with a button calling `onDone` once they are
// stored. `onAlreadyOn` is called when the server says a second factor is set already.
export function totpEnrolment(onDone, {onAlreadyOn = null, cancellable = true} = {}) {
  const box = h('div', {class: 'enrol', id: 'totp-enrol'});
  const errors = errorBox();

  const begin = () => {
    const start = h('button', {
      type: 'button',
      class: 'btn primary',
      id: 'totp-start',
      text: t('Set up a second factor'),
    });
    start.addEventListener('click', async () => {
      errors.clear();
      start.disabled = true;
      try {
        showEnrolment(await post('/api/v1/totp/enrol'));
      } catch (err) {
        if (err.code === 'totp_enabled' && onAlreadyOn) return onAlreadyOn();
        errors.show(err);
      } finally {
        start.disabled = false;
      }
    });
    replace(box, errors, start);
  };

  const showEnrolment = (enrolment) => {
    const uri = enrolment.otpauth_uri || enrolment.uri || '';
    const qr = uri ? qrSvg(uri, t('QR code of the key, for an authenticator app')) : null;
    const key = String(enrolment.secret || '');
    const code = h('input', {
      id: 'totp-code',
      required: true,
      inputmode: 'numeric',
      autocomplete: 'one-time-code',
      spellcheck: 'false',
      maxlength: 6,
      pattern: '[0-9]{6}',
      class: 'mono code-input',
    });
    const confirmErrors = errorBox();
    const confirm =
        h('form', {class: 'form inline', id: 'totp-confirm-form'}, confirmErrors,
          h('div', {class: 'row'},
            field(t('Code from the app'), code, t('6 digits; it changes every 30 seconds.'))),
          h('div', {class: 'actions'},
            h('button', {type: 'submit', class: 'btn primary', text: t('Turn on')}),
            cancellable ? h('button', {
              type: 'button',
              class: 'btn',
              text: t('Cancel'),
              onclick: () => begin(),
            }) :
                          null));
    onSubmit(confirm, confirmErrors, async () => {
      const answer = await post('/api/v1/totp/confirm', {code: code.value.trim()});
      showRecovery(answer.recovery_codes || []);
    });
    replace(
        box,
        h('div', {class: 'enrol-steps'},
          h('div', {class: 'qr-box', id: 'totp-qr'},
            qr || h('p', {
              class: 'muted',
              text: t('The QR code could not be drawn: type the key instead.')
            })),
          h('ol', {class: 'steps'}, h('li', {
              text: t(
                  'Scan the QR code with an authenticator app (any app for time-based one-time codes).'),
            }),
            h('li', {},
              t('Or type this key into the app by hand (time-based, 6 digits, 30 seconds):'),
              h('code', {
                class: 'secret-key',
                id: 'totp-secret',
                dataset: {secret: key},
                text: key.replace(/(.{4})(?=.)/g, '$1 '),
              })),
            h('li', {text: t('Enter the code the app shows to turn the second factor on.')}))),
        confirm);
    code.focus();
  };

  const showRecovery = (codes) => {
    const done = h('button', {
      type: 'button',
      class: 'btn primary',
      id: 'totp-done',
      text: t('I have stored the recovery codes'),
    });
    done.addEventListener('click', () => onDone());
    replace(
        box,
        notice(t('The second factor is on. Signing in now asks for a code from the app.'), 'info'),
        notice(
            t('Store these ten recovery codes somewhere safe now (a password manager, or on paper): each signs you in once in place of a code if the app is lost. They are shown only this once.'),
            'warn'),
        h('ol', {class: 'recovery', id: 'recovery-codes'},
          codes.map((c) => h('li', {}, h('code', {text: c})))),
        done);
    done.focus();
  };

  begin();
  return box;
}

// Returns the form that removes the second factor (your current password), calling `onDone`.
function totpDisableForm(onDone) {
  const errors = errorBox();
  const current = h('input', {
    type: 'password',
    id: 'totp-disable-password',
    autocomplete: 'current-password',
    required: true,
  });
  const form =
      h('form', {class: 'form inline', id: 'totp-disable-form'}, errors,
        h('div', {class: 'row'}, field(t('Current password'), current)),
        h('button', {type: 'submit', class: 'btn danger', text: t('Remove the second factor')}));
  return onSubmit(form, errors, async () => {
    await post('/api/v1/totp/disable', {current_password: current.value});
    current.value = '';
    await onDone();
  });
}

// The "Second factor" section's content for `state` (true on, false off, null not known).
function secondFactor(box, state, message = null) {
  const again = (next, text) => secondFactor(box, next, text);
  const said = message ? notice(message) : null;
  const disable = () => totpDisableForm(() => again(false, t('The second factor is removed.')));
  const enrol = () => totpEnrolment(() => again(true, t('The second factor is on.')), {
    onAlreadyOn: () => again(true, t('A second factor is set already.')),
  });
  if (state === true) {
    replace(
        box, said, h('p', {
          id: 'totp-state',
          text:
              t('On: signing in asks for a code from your authenticator app (or a recovery code).'),
        }),
        disable());
  } else if (state === false) {
    replace(
        box, said,
        h('p', {id: 'totp-state', text: t('Off: signing in asks for your password only.')}),
        enrol());
  } else {
    replace(
        box, said, h('p', {
          id: 'totp-state',
          text: t(
              'Signing in can ask for a one-time code from an authenticator app as well as your password.'),
        }),
        enrol(),
        h('details', {class: 'disable-details'},
          h('summary', {text: t('Remove a second factor you set up')}), disable()));
  }
}

async function render(ctx) {
  ctx.title(t('Your account'));
  const who = session.who;
  const errors = errorBox();
  const cookie = who.session?.kind === 'session';
  const changed = h('div', {id: 'password-changed', 'aria-live': 'polite'});
  const sessions = table(
      [
        {
          label: t('Session'),
          cell: (s) =>
              [h('span', {title: s.id, text: s.label || shortId(s.id)}),
               s.current ?
                   [' ', h('span', {class: 'badge ok current-session', text: t('this session')})] :
                   null,
  ],
        },
        {label: t('Signed in'), cell: (s) => timeEl(s.created_at)},
        {label: t('Last used'), class: 'wide', cell: (s) => timeEl(s.last_used_at)},
        {label: t('Ends by'), class: 'wide', cell: (s) => timeEl(s.expires_at)},
        {
          label: '',
          class: 'row-actions',
          cell: (s) => s.current ? null :
                                   actionButton(
                                       t('Revoke'), 'self',
                                       async () => {
                                         await post(`/api/v1/sessions/${s.id}/revoke`);
                                         await loadSessions();
                                       },
                                       {errors, confirm: t('Confirm revoke')}),
        },
      ],
      null, t('You are not signed in with a password anywhere.'));
  sessions.id = 'sessions';
  const loadSessions = async () => {
    const list = await get('/api/v1/sessions', {}, ctx.signal);
    sessions.setRows(list.items || []);
  };
  const factorBox = h('div', {id: 'totp'});
  secondFactor(factorBox, session.totpEnabled);
  replace(
      ctx.main,
      pageHeader(t('Your account')),
      errors,
      section(null, facts([
                [t('Name'), h('strong', {id: 'account-name', text: who.principal.name})],
                [t('Kind'), t(who.principal.kind)],
                [t('Installation role'), t(who.installation_role || 'none')],
                [
                  t('Signed in with'),
                  cookie ? t('your password: a session of this browser') :
                           t('an API token, kept in this tab only'),
                ],
                [
                  t('Until'),
                  who.session?.expires_at ? timeEl(who.session.expires_at) :
                                            t('no expiry: until the token is revoked')
                ],
              ])),
      section(
          t('Sessions'), h('p', {
            class: 'muted small',
            text: t(
                'Where you are signed in with your password: browsers and ql login. Revoking a session signs it out within 2 seconds; changing your password signs out all but this one.'),
          }),
          sessions),
      section(
          t('Password'), changed,
          passwordForm(
              async () => {
                replace(
                    changed, notice(t('Password changed. Your other sessions are signed out.')));
                await loadSessions();
              },
              {requireCurrent: false})),
      section(
          t('Second factor'), h('p', {
            class: 'muted small',
            text: t(
                'A time-based one-time code (TOTP) from an app on your phone, asked for after your password.'),
          }),
          factorBox),
  );
  try {
    await loadSessions();
  } catch (err) {
    if (err.name === 'AbortError') throw err;
    errors.show(err);
    sessions.setFailed();
  }
}
