// SecretRefs: how a task's environment names a secret instead of holding its value
// (docs/api.md "Secrets"). A ref is `qlsecret:v1:` and the unpadded base64url of the canonical
// JSON {"name":..,"projectId":..[,"version":N]} (keys sorted, no spaces), written exactly as
// `ql task add --secret-env VAR=NAME[@VERSION]` writes it; without a version it means the
// secret's current version. The panel shows refs as names, never as values (it has none).

import {t} from './i18n.js';

const PREFIX = 'qlsecret:v1:';
const NAME = /^[A-Za-z_][A-Za-z0-9_.-]{0,127}$/;
const VERSION = /^[1-9][0-9]{0,17}$/;

// Returns true when an environment value is meant as a ref.
export function isSecretRef(value) {
  return typeof value === 'string' && value.startsWith(PREFIX);
}

// Returns the ref naming secret `name` of project `projectId`, at `version` (a number) or the
// current one (null).
export function encodeSecretRef(projectId, name, version = null) {
  // Names are ASCII and ids UUIDs, so JSON.stringify with the keys in sorted order is canonical.
  const json = JSON.stringify(version ? {name, projectId, version} : {name, projectId});
  return PREFIX + btoa(json).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
}

// Returns {name, projectId, version} of a ref, or null when it cannot be read.
export function decodeSecretRef(value) {
  if (!isSecretRef(value)) return null;
  try {
    const b64 = value.slice(PREFIX.length).replace(/-/g, '+').replace(/_/g, '/');
    const ref = JSON.parse(atob(b64));
    if (typeof ref.name !== 'string' || typeof ref.projectId !== 'string') return null;
    return {name: ref.name, projectId: ref.projectId, version: ref.version ?? null};
  } catch {
    return null;
  }
}

// Returns "NAME" or "NAME@VERSION" for a decoded ref.
export function secretTargetText(ref) {
  return ref.version ? `${ref.name}@${ref.version}` : ref.name;
}

// Parses "NAME" or "NAME@VERSION" (what follows `VAR=` in a --secret-env entry) into
// {name, version}; throws an Error with code `form` naming `what` when it is not one.
export function parseSecretTarget(text, what) {
  const at = text.indexOf('@');
  const name = at < 0 ? text : text.slice(0, at);
  const digits = at < 0 ? null : text.slice(at + 1);
  const fail = (why) => {
    throw Object.assign(new Error(`${what}: ${why}`), {code: 'form'});
  };
  if (!NAME.test(name))
    fail(
        t('secret name "{name}" is not 1–128 of A-Z a-z 0-9 _ . - starting with a letter or _',
          {name}));
  if (digits !== null && !VERSION.test(digits)) {
    fail(t('version "{version}" is not a number from 1', {version: digits}));
  }
  return {name, version: digits === null ? null : Number(digits)};
}
