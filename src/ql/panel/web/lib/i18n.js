// The panel's languages: English and Simplified Chinese. A text is looked up by its English
// words (the key is what an English reader sees), with `{name}` placeholders filled from
// `params`; a key missing from the chosen language's dictionary shows in English. The choice
// comes from the header's switch (kept in localStorage: a preference, not a credential), else
// from the browser's languages (the first of them that is Chinese or English). Changing it
// reloads the page, so every text, including those made once when a module loads, follows.

import zhCN from './locales/zh-CN.js';

const KEY = 'ql.lang';

// The languages offered by the switch: [code, name in that language].
export const LOCALES = [['en', 'English'], ['zh-CN', '简体中文']];

// English is the keys themselves; its dictionary only holds texts whose English form differs
// from the key (none today).
const DICTIONARIES = {
  en: {},
  'zh-CN': zhCN.texts
};
const CODES = {
  en: {},
  'zh-CN': zhCN.codes
};

function stored() {
  try {
    return localStorage.getItem(KEY);
  } catch {
    return null;  // storage refused (a privacy setting): the browser's languages decide
  }
}

// Returns the language for the browser's `languages`: the first that is Chinese (any zh*)
// or English decides; otherwise English.
export function localeFor(languages) {
  for (const l of languages || []) {
    const tag = String(l).toLowerCase();
    if (tag === 'zh' || tag.startsWith('zh-')) return 'zh-CN';
    if (tag === 'en' || tag.startsWith('en-')) return 'en';
  }
  return 'en';
}

function choose() {
  const s = stored();
  if (s && DICTIONARIES[s]) return s;
  return localeFor(navigator.languages?.length ? navigator.languages : [navigator.language]);
}

// The language in use ('en' or 'zh-CN'), also `<html lang>`.
export const locale = choose();
document.documentElement.lang = locale;

// Remembers `next` as the chosen language and reloads the page in it.
export function setLocale(next) {
  if (!DICTIONARIES[next] || next === locale) return;
  try {
    localStorage.setItem(KEY, next);
  } catch {
    // not remembered; the reload below still cannot change the language, so say nothing more
  }
  location.reload();
}

// Returns the text for `key` (its English words) in the current language, with `{name}`
// replaced by params.name.
export function t(key, params) {
  const text = DICTIONARIES[locale][key] ?? key;
  if (!params) return text;
  return text.replace(/\{(\w+)\}/g, (m, name) => (name in params ? String(params[name]) : m));
}

// Returns what an API error code means in the current language, or null when the panel does
// not know the code (then the server's own message shows). The code itself always shows too.
export function codeMessage(code) {
  return CODES[locale][code] ?? null;
}

const numbers = new Map();
// Returns `n` formatted for the current language (`options` as for Intl.NumberFormat).
export function numberText(n, options = {}) {
  const key = JSON.stringify(options);
  if (!numbers.has(key)) numbers.set(key, new Intl.NumberFormat(locale, options));
  return numbers.get(key).format(n);
}

// Every key of the Chinese dictionary, for the browser test's check that each text the pages
// look up has a translation.
export const zhKeys = () => Object.keys(zhCN.texts);

// Returns the text for `key` as an array of strings and nodes: each `{name}` becomes
// parts.name (a DOM node, or text), so a link can sit inside a translated sentence.
export function tParts(key, parts) {
  const text = DICTIONARIES[locale][key] ?? key;
  return text.split(/(\{\w+\})/).filter((piece) => piece !== '').map((piece) => {
    const m = /^\{(\w+)\}$/.exec(piece);
    return m && m[1] in parts ? parts[m[1]] : piece;
  });
}
