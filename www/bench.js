// The benchmark's requests (the demo's ?bench mode, and scripts/bench-browser.mjs, which also
// writes them for `hotprefix session` so that native figures come from the same prompts): a
// system prompt and a generated document (~1,500 tokens for the default model, less when the
// context is small), asked twice; then a short prompt that decodes 64 tokens.

function document(words) {
  const vocab = ['canal', 'lock', 'ship', 'water', 'level', 'gate', 'engineer', 'harbour', 'river', 'tide', 'cargo', 'route', 'basin', 'pump', 'dam', 'lake'];
  let seed = 7;
  const next = () => { seed = (seed * 1103515245 + 12345) % 2147483648; return seed; };
  return Array.from({ length: words }, (_, i) => vocab[next() % vocab.length] + ((i + 1) % 12 === 0 ? '.' : '')).join(' ');
}

/** [cold, warm, decode]: `{name, messages, max_tokens}` each, for a context of `contextSize`. */
export function benchRequests(contextSize) {
  const words = contextSize >= 4096 ? 1200 : Math.floor(contextSize / 8);
  const system = { role: 'system', content: `Answer from the document.\n\n<document>\n${document(words)}\n</document>` };
  return [
    { name: 'cold', messages: [system, { role: 'user', content: 'What is this about?' }], max_tokens: 1 },
    { name: 'warm', messages: [system, { role: 'user', content: 'Who works at the locks?' }], max_tokens: 1 },
    { name: 'decode', messages: [{ role: 'user', content: 'Write a long story about a canal.' }], max_tokens: 64 },
  ];
}
