// Names for ids, fetched once per page view and kept for 30 s.

import {get} from './api.js';

const cache = new Map();  // task id → {name, at}
const TTL_MS = 30_000;

// Returns a Map from each task id in `ids` to its name (the id itself when it cannot be read).
export async function taskNames(ids, signal) {
  const now = Date.now();
  const wanted = [...new Set(ids.filter(Boolean))];
  await Promise.all(
      wanted.filter((id) => !cache.has(id) || now - cache.get(id).at > TTL_MS).map(async (id) => {
        try {
          const task = await get(`/api/v1/tasks/${id}`, {}, signal);
          cache.set(id, {name: task.name, at: now});
        } catch (err) {
          if (err.name === 'AbortError') throw err;
          cache.set(id, {name: id.slice(0, 8), at: now});
        }
      }),
  );
  return new Map(wanted.map((id) => [id, cache.get(id)?.name ?? id.slice(0, 8)]));
}

// Forgets a task's name (after it was renamed).
export function forgetTask(id) {
  cache.delete(id);
}
