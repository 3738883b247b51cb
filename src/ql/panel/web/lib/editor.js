// A plain text editor: a monospace <textarea> (no wrapping, no spell check) with a gutter of
// line numbers beside it that scrolls with it. Tab keeps moving the focus, as everywhere else.

import {h} from './dom.js';

// Returns the editor element; `el.area` is the textarea (value, readOnly, focus) and
// `el.setText(text)` replaces the text. `attrs` go on the textarea (id, aria-label, ...).
export function codeEditor(text = '', attrs = {}) {
  const gutter = h('pre', {class: 'editor-gutter', 'aria-hidden': 'true'});
  const area = h('textarea', {
    class: 'editor-text',
    wrap: 'off',
    spellcheck: 'false',
    autocomplete: 'off',
    autocapitalize: 'off',
    // As tall as the text (10 to 28 lines); the reader may resize it.
    rows: Math.min(28, Math.max(10, text.split('\n').length + 2)),
    ...attrs,
  });
  let shown = 0;
  const number = () => {
    const lines = area.value.split('\n').length;
    if (lines === shown) return;
    shown = lines;
    gutter.textContent = Array.from({length: lines}, (_, i) => String(i + 1)).join('\n') + '\n';
    gutter.scrollTop = area.scrollTop;
  };
  area.addEventListener('input', number);
  area.addEventListener('scroll', () => {
    gutter.scrollTop = area.scrollTop;
  });
  const el = h('div', {class: 'editor'}, gutter, area);
  el.area = area;
  el.setText = (value) => {
    area.value = value;
    number();
  };
  el.setText(text);
  return el;
}
