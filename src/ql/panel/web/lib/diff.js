// A line diff of two texts: the lines they share (a longest common subsequence) kept, the rest
// removed or added, and the kept lines far from any change folded away.

// How many kept lines are shown around a change.
const CONTEXT = 3;
// Above this many cells the common-subsequence table is not built: the changed middle is shown
// as removed then added, which is still a correct diff, only not the shortest.
const MAX_CELLS = 4_000_000;

// Returns the lines of `text` ('' has none; a final newline does not start another line).
export function linesOf(text) {
  if (text === '') return [];
  const lines = text.split('\n');
  if (lines[lines.length - 1] === '') lines.pop();
  return lines;
}

// Returns the diff of `before` and `after` (texts) as [{op, text, a, b}]: op is ' ' (kept),
// '-' (only in before) or '+' (only in after); a and b are the 1-based line numbers in before
// and after (null on the side a line is not in).
export function diffLines(before, after) {
  const a = linesOf(before);
  const b = linesOf(after);
  let start = 0;
  while (start < a.length && start < b.length && a[start] === b[start]) start++;
  let endA = a.length;
  let endB = b.length;
  while (endA > start && endB > start && a[endA - 1] === b[endB - 1]) {
    endA--;
    endB--;
  }
  const out = [];
  for (let i = 0; i < start; i++) out.push({op: ' ', text: a[i], a: i + 1, b: i + 1});
  const n = endA - start;
  const m = endB - start;
  if (n && m && (n + 1) * (m + 1) <= MAX_CELLS) {
    // lcs[i * (m + 1) + j]: the common subsequence of a[start + i..] and b[start + j..].
    const w = m + 1;
    const lcs = new Uint32Array((n + 1) * w);
    for (let i = n - 1; i >= 0; i--) {
      for (let j = m - 1; j >= 0; j--) {
        lcs[i * w + j] = a[start + i] === b[start + j] ?
            lcs[(i + 1) * w + j + 1] + 1 :
            Math.max(lcs[(i + 1) * w + j], lcs[i * w + j + 1]);
      }
    }
    let i = 0;
    let j = 0;
    while (i < n || j < m) {
      if (i < n && j < m && a[start + i] === b[start + j]) {
        out.push({op: ' ', text: a[start + i], a: start + i + 1, b: start + j + 1});
        i++;
        j++;
      } else if (i < n && (j === m || lcs[(i + 1) * w + j] >= lcs[i * w + j + 1])) {
        // Removed before added where either keeps the subsequence, as diff tools show them.
        out.push({op: '-', text: a[start + i], a: start + i + 1, b: null});
        i++;
      } else {
        out.push({op: '+', text: b[start + j], a: null, b: start + j + 1});
        j++;
      }
    }
  } else {
    for (let i = start; i < endA; i++) out.push({op: '-', text: a[i], a: i + 1, b: null});
    for (let j = start; j < endB; j++) out.push({op: '+', text: b[j], a: null, b: j + 1});
  }
  for (let i = endA, j = endB; i < a.length; i++, j++) {
    out.push({op: ' ', text: a[i], a: i + 1, b: j + 1});
  }
  return out;
}

// Returns the diff with kept lines more than CONTEXT lines from a change replaced by one
// {op: '…', count} entry each (an unchanged text becomes a single such entry, or nothing).
export function foldUnchanged(lines) {
  const near = new Uint8Array(lines.length);
  lines.forEach((l, i) => {
    if (l.op === ' ') return;
    for (let k = Math.max(0, i - CONTEXT); k <= Math.min(lines.length - 1, i + CONTEXT); k++) {
      near[k] = 1;
    }
  });
  const out = [];
  let skipped = 0;
  lines.forEach((l, i) => {
    if (l.op === ' ' && !near[i]) {
      skipped++;
      return;
    }
    if (skipped) out.push({op: '…', count: skipped});
    skipped = 0;
    out.push(l);
  });
  if (skipped) out.push({op: '…', count: skipped});
  return out;
}
