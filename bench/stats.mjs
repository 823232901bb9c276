// What the Node benchmarks share: a median and a timer.
export const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};

// [milliseconds, value] of an async call.
export const timed = async (f) => {
  const t0 = performance.now();
  const v = await f();
  return [performance.now() - t0, v];
};
