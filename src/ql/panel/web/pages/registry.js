// Every page of the panel, in navigation order. A page is a module exporting
//   nav:    {label, path, visible?(session)} or null (not in the navigation),
//   routes: [{pattern: '/things/:id', render: async (ctx) => ...}] (literal patterns first).
// Adding a page is one module here plus its place in the list below.

import * as account from './account.js';
import * as approvals from './approvals.js';
import * as audit from './audit.js';
import * as dashboard from './dashboard.js';
import * as history from './history.js';
import * as notifications from './notifications.js';
import * as people from './people.js';
import * as projects from './projects.js';
import * as runs from './runs.js';
import * as scripts from './scripts.js';
import * as secrets from './secrets.js';
import * as tasks from './tasks.js';
import * as triggers from './triggers.js';
import * as workers from './workers.js';

export const pages = [
  dashboard, tasks, scripts, triggers, runs, history, approvals, secrets, notifications, projects,
  people, workers, audit, account
];
