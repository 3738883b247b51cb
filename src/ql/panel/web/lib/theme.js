// The colour theme: the system's (prefers-color-scheme, followed as it changes), light or
// dark, chosen in the header and kept in localStorage (a preference, not a credential).
// `<html data-theme>` holds the theme in effect (light or dark); panel.css colours follow it.

const KEY = 'ql.theme';

// The choices offered by the header's switch.
export const THEMES = ['system', 'light', 'dark'];

const media = window.matchMedia('(prefers-color-scheme: dark)');

function stored() {
  try {
    const value = localStorage.getItem(KEY);
    return THEMES.includes(value) ? value : 'system';
  } catch {
    return 'system';
  }
}

let choice = stored();

function apply() {
  const dark = choice === 'dark' || (choice === 'system' && media.matches);
  document.documentElement.dataset.theme = dark ? 'dark' : 'light';
}

// Returns the choice in effect: 'system', 'light' or 'dark'.
export function themeChoice() {
  return choice;
}

// Chooses `next` ('system', 'light' or 'dark'), remembers it and applies it at once.
export function setTheme(next) {
  if (!THEMES.includes(next)) return;
  choice = next;
  try {
    localStorage.setItem(KEY, next);
  } catch {
    // kept for this page only
  }
  apply();
}

media.addEventListener('change', apply);
apply();
