// canonicalJSON: one serialisation per value (keys sorted by code point, no whitespace), so that a
// tool schema or a JSON document built twice gives the same text, the same tokens and a cache hit.

function byCodePoint(a, b) {
  // UTF-16 order differs from code point order only for astral vs U+E000–U+FFFF characters.
  const x = [...a], y = [...b];
  for (let i = 0; i < Math.min(x.length, y.length); i++) {
    const d = x[i].codePointAt(0) - y[i].codePointAt(0);
    if (d) return d;
  }
  return x.length - y.length;
}

function write(value, seen) {
  if (value !== null && typeof value === 'object' && typeof value.toJSON === 'function') value = value.toJSON();
  switch (typeof value) {
    case 'string': return JSON.stringify(value);
    case 'number': return Number.isFinite(value) ? JSON.stringify(value) : 'null';
    case 'boolean': return value ? 'true' : 'false';
    case 'bigint': return value.toString();
    case 'object': {
      if (value === null) return 'null';
      if (seen.has(value)) throw new TypeError('canonicalJSON: the value is circular');
      seen.add(value);
      let out;
      if (Array.isArray(value)) {
        out = `[${value.map((v) => write(v, seen) ?? 'null').join(',')}]`;
      } else {
        const parts = [];
        for (const k of Object.keys(value).sort(byCodePoint)) {
          const v = write(value[k], seen);
          if (v !== undefined) parts.push(`${JSON.stringify(k)}:${v}`);
        }
        out = `{${parts.join(',')}}`;
      }
      seen.delete(value);
      return out;
    }
    default: return undefined; // undefined, functions and symbols are left out, as JSON.stringify does
  }
}

/**
 * The canonical JSON text of `value`: object keys sorted by code point at every depth, no
 * whitespace, numbers and strings as JSON.stringify writes them. Equal values give equal text.
 */
export function canonicalJSON(value) {
  return write(value, new Set());
}
