// Builds DOM nodes without HTML strings: every text goes through textContent, so nothing the
// API returns is ever parsed as markup (the page also runs under Trusted Types).

// Returns a new element. `attrs` keys: `class`, `text`, `on<event>` (listener), `dataset`
// (object), boolean attributes (true/false), anything else as an attribute; `children` are
// nodes, strings or arrays of them (null and false are skipped).
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === 'class')
      el.className = value;
    else if (key === 'text')
      el.textContent = value;
    else if (key === 'dataset')
      Object.assign(el.dataset, value);
    else if (key.startsWith('on') && typeof value === 'function') {
      el.addEventListener(key.slice(2), value);
    } else if (key === 'value')
      el.value = value;
    else if (key === 'checked')
      el.checked = !!value;
    else if (value === true)
      el.setAttribute(key, '');
    else
      el.setAttribute(key, String(value));
  }
  append(el, children);
  return el;
}

// Appends nodes, strings or (nested) arrays of them to `parent`.
export function append(parent, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    parent.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return parent;
}

// Replaces the children of `parent`.
export function replace(parent, ...children) {
  parent.replaceChildren();
  return append(parent, children);
}

// Returns a random id of 32 hex digits (crypto.getRandomValues works outside secure contexts
// too, unlike randomUUID), used as a mutation id so a repeated submit is applied once.
export function randomId(prefix = 'panel-') {
  const bytes = new Uint8Array(16);
  crypto.getRandomValues(bytes);
  return prefix + Array.from(bytes, (b) => b.toString(16).padStart(2, '0')).join('');
}

// Returns `fn` delayed until `ms` have passed without another call.
export function debounce(fn, ms) {
  let timer = 0;
  return (...args) => {
    clearTimeout(timer);
    timer = setTimeout(() => fn(...args), ms);
  };
}
