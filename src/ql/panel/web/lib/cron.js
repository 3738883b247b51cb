// A cron expression in words for the common shapes ("every day at 02:30", "每天 02:30"); null
// for any other, which the pages then show as the expression itself.

import {t} from './i18n.js';

const DAYS = ['SUN', 'MON', 'TUE', 'WED', 'THU', 'FRI', 'SAT'];
const DAY_WORDS = ['Sunday', 'Monday', 'Tuesday', 'Wednesday', 'Thursday', 'Friday', 'Saturday'];

const number = (field, max) =>
    (/^\d{1,2}$/.test(field) && Number(field) <= max ? Number(field) : null);
const step = (field) => {
  const m = /^(?:\*|0)\/(\d{1,2})$/.exec(field);
  return m && Number(m[1]) > 0 ? Number(m[1]) : null;
};
const pad = (n) => String(n).padStart(2, '0');

function weekday(field) {
  const upper = field.toUpperCase();
  if (DAYS.includes(upper)) return DAYS.indexOf(upper);
  const n = number(field, 7);
  return n === null ? null : n % 7;
}

// Returns `expression` (5 fields, or 6 with seconds first) in words, or null.
export function cronWords(expression) {
  const fields = String(expression || '').trim().split(/\s+/);
  let second = '0';
  if (fields.length === 6) second = fields.shift();
  if (fields.length !== 5) return null;
  const [minute, hour, dom, month, dow] = fields;
  const everyDay = dom === '*' && month === '*';
  if (fields.every((f) => f === '*')) {
    if (second === '*') return t('every second');
    const s = step(second);
    if (s === 1) return t('every second');
    if (s) return t('every {n} seconds', {n: s});
    return second === '0' ? t('every minute') : null;
  }
  if (second !== '0') return null;
  if (everyDay && dow === '*' && hour === '*') {
    const m = step(minute);
    if (m === 1) return t('every minute');
    if (m) return t('every {n} minutes', {n: m});
    const at = number(minute, 59);
    if (at !== null) return t('every hour at minute {m}', {m: at});
    return null;
  }
  const m = number(minute, 59);
  if (m === null) return null;
  if (everyDay && dow === '*' && step(hour) && m === 0)
    return t('every {n} hours', {n: step(hour)});
  const h = number(hour, 23);
  if (h === null) return null;
  const time = `${pad(h)}:${pad(m)}`;
  if (everyDay && dow === '*') return t('every day at {time}', {time});
  if (everyDay && (dow === '1-5' || dow.toUpperCase() === 'MON-FRI')) {
    return t('weekdays at {time}', {time});
  }
  if (everyDay && weekday(dow) !== null) {
    return t('every {day} at {time}', {day: t(DAY_WORDS[weekday(dow)]), time});
  }
  const d = number(dom, 31);
  if (d !== null && d > 0 && month === '*' && dow === '*') {
    return t('on day {d} of every month at {time}', {d, time});
  }
  return null;
}
