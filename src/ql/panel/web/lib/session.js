// Who is signed in, one of two ways: a password sign-in, whose session the server keeps in an
// HttpOnly cookie this script never sees (only the session's CSRF token, which every write
// sends back); or a pasted API token (sessionStorage only: it leaves with the tab, never goes
// into a URL or a cookie). Also the answer of GET /api/v1/whoami and the project looked at.

const TOKEN_KEY = 'ql.token';
const CSRF_KEY = 'ql.csrf';
const PROJECT_KEY = 'ql.project';
const RANK = {
  none: 0,
  viewer: 1,
  operator: 2,
  admin: 3,
  owner: 4
};

export const session = {
  who: null,     // GET /api/v1/whoami
  projects: [],  // GET /api/v1/projects
  // A restriction learned from the sign-in answer or a refused call, for a whoami that does
  // not name one ('password_change', 'totp_enrolment' or null).
  hint: null,

  get token() {
    return sessionStorage.getItem(TOKEN_KEY) || '';
  },
  setToken(token) {
    sessionStorage.setItem(TOKEN_KEY, token);
  },
  // The CSRF token of the cookie session ('' when signed in with an API token).
  get csrf() {
    return sessionStorage.getItem(CSRF_KEY) || '';
  },
  setCsrf(csrf) {
    sessionStorage.setItem(CSRF_KEY, csrf);
  },
  get signedIn() {
    return Boolean(this.token || this.csrf);
  },
  clear() {
    sessionStorage.removeItem(TOKEN_KEY);
    sessionStorage.removeItem(CSRF_KEY);
    sessionStorage.removeItem(PROJECT_KEY);
    this.who = null;
    this.projects = [];
    this.hint = null;
  },

  // What the session must do before anything else: 'password_change' (choose a new password),
  // 'totp_enrolment' (set up a second factor) or null. whoami's `session.restriction` decides
  // when it has one; otherwise the hint.
  get restriction() {
    const current = this.who?.session;
    if (current && 'restriction' in current) return current.restriction || null;
    return this.hint || null;
  },
  // Whether the principal has a second factor: true, false, or null when the server does not say.
  get totpEnabled() {
    const known = this.who?.totp_enabled ?? this.who?.principal?.totp_enabled;
    return typeof known === 'boolean' ? known : null;
  },

  // The project slug every request names (`?project=`): the URL's, else the last one used.
  get project() {
    return sessionStorage.getItem(PROJECT_KEY) || 'default';
  },
  setProject(slug) {
    sessionStorage.setItem(PROJECT_KEY, slug || 'default');
  },

  // Returns the caller's role in the current project: the higher of the installation role
  // (an installation owner or admin holds it in every project) and the project binding.
  role() {
    if (!this.who) return 'none';
    let best = this.who.installation_role || 'none';
    const current = this.project;
    for (const p of this.who.projects || []) {
      if ((p.slug === current || p.id === current) && RANK[p.role] > RANK[best]) best = p.role;
    }
    return RANK[best] === undefined ? 'none' : best;
  },
  // True when the caller's role in the current project is at least `role`.
  can(role) {
    return RANK[this.role()] >= RANK[role];
  },
  // True for an installation owner or admin (principals, tokens, audit, new projects).
  installationAdmin() {
    const r = this.who?.installation_role;
    return r === 'owner' || r === 'admin';
  },
};

export function roleRank(role) {
  return RANK[role] ?? 0;
}
