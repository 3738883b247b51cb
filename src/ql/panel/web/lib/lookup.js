// Names for ids: tasks' fetched once per page view and kept for 30 s, principals' per page.

import {get} from './api.js';
import {session} from './session.js';

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

// Returns a Map from principal id to name: every principal for an installation admin (the only
// one who may list them), else the caller alone; other ids are shown shortened by the pages.
export async function principalNames(signal) {
  const names = new Map();
  if (session.who) names.set(session.who.principal.id, session.who.principal.name);
  if (!session.installationAdmin()) return names;
  try {
    const list = (await get('/api/v1/principals', {}, signal)).items || [];
    for (const p of list) names.set(p.id, p.name);
  } catch (err) {
    if (err.name === 'AbortError') throw err;
  }
  return names;
}
