// Times and durations for people, in the chosen language: instants in the viewer's zone, a
// trigger's wall time in the trigger's zone beside it, and durations (a running one ticking).

import {h} from './dom.js';
import {locale, numberText, t} from './i18n.js';

export const viewerZone = Intl.DateTimeFormat().resolvedOptions().timeZone || 'UTC';

const formatters = new Map();
function formatter(zone) {
  if (!formatters.has(zone)) {
    formatters.set(
        zone,
        new Intl.DateTimeFormat(locale, {
          timeZone: zone,
          year: 'numeric',
          month: 'short',
          day: '2-digit',
          hour: '2-digit',
          minute: '2-digit',
          second: '2-digit',
          hourCycle: 'h23',
          timeZoneName: 'short',
        }),
    );
  }
  return formatters.get(zone);
}

// Returns `iso` (RFC 3339) as text in `zone` (default: the viewer's), or '—' for null.
export function timeText(iso, zone = viewerZone) {
  if (!iso) return '—';
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return iso;
  try {
    return formatter(zone).format(d);
  } catch {
    return iso;
  }
}

// Returns a <time> for `iso` in the viewer's zone (the UTC instant in its title); with
// `zone`, the wall time there follows in a smaller span (e.g. the trigger's zone).
export function timeEl(iso, zone) {
  if (!iso) return h('span', {class: 'muted', text: '—'});
  const main = h('time', {datetime: iso, title: `${iso} (UTC)`, text: timeText(iso)});
  if (!zone || zone === viewerZone) return main;
  return h(
      'span', {class: 'time-pair'}, main,
      h('span', {class: 'zone', text: `${timeText(iso, zone)} · ${zone}`}));
}

// Returns a short human duration for milliseconds ("850 ms", "4.2 s", "3 min 5 s", "2 h 1 min";
// in Chinese "4.2 秒", "3 分 5 秒").
export function durationText(ms) {
  if (ms === null || ms === undefined || Number.isNaN(ms)) return '—';
  if (ms < 1000) return t('{n} ms', {n: numberText(Math.round(ms))});
  const s = ms / 1000;
  if (s < 60) {
    const digits = s < 10 ? 1 : 0;
    return t(
        '{n} s',
        {n: numberText(s, {minimumFractionDigits: digits, maximumFractionDigits: digits})});
  }
  const m = Math.floor(s / 60);
  if (m < 60) return t('{m} min {s} s', {m, s: Math.floor(s % 60)});
  const hr = Math.floor(m / 60);
  if (hr < 48) return t('{h} h {m} min', {h: hr, m: m % 60});
  return t('{d} d {h} h', {d: Math.floor(hr / 24), h: hr % 24});
}

// Elements showing how long a running thing has run, updated every second while on screen.
const ticking = new Set();
let ticker = 0;
function tick() {
  for (const el of ticking) {
    if (!el.isConnected) {
      ticking.delete(el);
      continue;
    }
    el.textContent = durationText(Date.now() - Date.parse(el.dataset.since));
  }
  if (!ticking.size) {
    clearInterval(ticker);
    ticker = 0;
  }
}

// Returns the duration from `start` to `end` as text in a <span>; while `start` is set and
// `end` is not (it runs), the text counts up every second from `start` without a request.
export function durationEl(start, end) {
  const el = h('span', {class: 'duration', text: durationText(between(start, end))});
  if (start && !end) {
    el.dataset.since = start;
    el.classList.add('live');
    ticking.add(el);
    if (!ticker) ticker = setInterval(tick, 1000);
  }
  return el;
}

// Returns the duration between two RFC 3339 instants (to now when `end` is null).
export function between(start, end) {
  if (!start) return null;
  return (end ? new Date(end) : new Date()) - new Date(start);
}

// Returns the last 8 characters of an id (the full id goes in a title): ids are UUIDv7, whose
// leading digits are a timestamp shared by ids made close together.
export function shortId(id) {
  return id ? id.slice(-8) : '—';
}

// Returns the UTC offset part of a local RFC 3339 time ("2026-03-08T03:00:00-04:00" → "-04:00").
export function offsetOf(local) {
  const m = /([+-]\d\d:\d\d|Z)$/.exec(local || '');
  return m ? (m[1] === 'Z' ? '+00:00' : m[1]) : '';
}

// Returns a datetime-local input value ("2026-03-08T07:00") as an ISO instant in the viewer's
// zone, or '' when empty.
export function isoFromLocalInput(value) {
  if (!value) return '';
  const d = new Date(value);
  return Number.isNaN(d.getTime()) ? '' : d.toISOString();
}

// Returns an ISO instant as a datetime-local input value in the viewer's zone.
export function localInputFromIso(iso) {
  if (!iso) return '';
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return '';
  const p = (n) => String(n).padStart(2, '0');
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())}T${p(d.getHours())}:${
      p(d.getMinutes())}`;
}
