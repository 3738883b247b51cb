// QR codes as SVG, for the otpauth:// URI an authenticator app scans. The code's modules come
// from the qrcode-generator library (Debian's node-qrcode-generator, embedded by the build as
// lib/vendor/qrcode.js and loaded by index.html as a classic script defining `qrcode`); the
// drawing is ours: one <path> of unit squares built with createElementNS, no markup string.

const SVG = 'http://www.w3.org/2000/svg';

// Returns an <svg> (class "qr") showing `text` as a QR code with error correction M and a
// four-module quiet zone, labelled `label` for assistive technology; null when the generator
// is not loaded.
export function qrSvg(text, label) {
  const generator = globalThis.qrcode;
  if (typeof generator !== 'function') return null;
  const code = generator(0, 'M');  // 0: the smallest version that holds the text
  code.addData(text);
  code.make();
  const count = code.getModuleCount();
  const quiet = 4;
  const size = count + 2 * quiet;
  let d = '';
  for (let row = 0; row < count; ++row) {
    for (let col = 0; col < count; ++col) {
      if (code.isDark(row, col)) d += `M${col + quiet} ${row + quiet}h1v1h-1z`;
    }
  }
  const svg = document.createElementNS(SVG, 'svg');
  svg.setAttribute('viewBox', `0 0 ${size} ${size}`);
  svg.setAttribute('class', 'qr');
  svg.setAttribute('role', 'img');
  svg.setAttribute('aria-label', label);
  svg.setAttribute('shape-rendering', 'crispEdges');
  const background = document.createElementNS(SVG, 'rect');
  background.setAttribute('class', 'qr-light');
  background.setAttribute('width', String(size));
  background.setAttribute('height', String(size));
  const modules = document.createElementNS(SVG, 'path');
  modules.setAttribute('class', 'qr-dark');
  modules.setAttribute('d', d);
  svg.append(background, modules);
  svg.dataset.modules = String(count);
  return svg;
}
