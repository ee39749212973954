"""Plain-numpy float64 references of optax's published update rules, for tests/test_optim_*,
and the two test problems (a quadratic and Rosenbrock) with runners for both sides.

Each reference is an object called as ``ref(grads, params, value) -> updates`` on dicts of
numpy arrays, keeping its own state; it is written from the papers' and optax docs' formulas,
independently of funcgrad.optim (which is used only by the funcgrad-side runner)."""
import numpy as np

import funcgrad
import funcgrad.numpy as fnp
from funcgrad import optim



def tmap(f, *trees):
    return {k: f(*(t[k] for t in trees)) for k in trees[0]}


def vdot(a, b):
    return sum(float(np.sum(a[k] * b[k])) for k in a)


def gnorm(a):
    return np.sqrt(vdot(a, a))


def leaf_norm(x):
    return np.sqrt(np.sum(x * x))


class Ref:
    """A reference optimizer: subclasses implement ``step(g, p, value) -> u``."""

    def __init__(self):
        self.t = 0
        self.s = {}

    def __call__(self, g, p, value=None):
        self.t += 1
        return self.step(g, p, value)

    def get(self, name, like, fill=0.0):
        if name not in self.s:
            self.s[name] = tmap(lambda x: np.full_like(x, fill), like)
        return self.s[name]


class Sgd(Ref):
    def __init__(self, lr, momentum=None, nesterov=False):
        super().__init__()
        self.lr, self.mu, self.nesterov = lr, momentum, nesterov

    def step(self, g, p, value):
        if self.mu is None:
            return tmap(lambda a: -self.lr * a, g)
        tr = tmap(lambda a, b: a + self.mu * b, g, self.get("tr", g))
        self.s["tr"] = tr
        d = tmap(lambda a, b: a + self.mu * b, g, tr) if self.nesterov else tr
        return tmap(lambda a: -self.lr * a, d)


class AdamDir(Ref):
    """Adam's direction m_hat / (sqrt(v_hat + eps_root) + eps) (NAdam's look-ahead m_hat when
    nesterov); subclasses add the learning rate and decays."""

    def __init__(self, b1=0.9, b2=0.999, eps=1e-8, eps_root=0.0, nesterov=False):
        super().__init__()
        self.b1, self.b2, self.eps, self.eps_root, self.nesterov = b1, b2, eps, eps_root, nesterov

    def direction(self, g):
        b1, b2, t = self.b1, self.b2, self.t
        m = tmap(lambda a, b: b1 * b + (1 - b1) * a, g, self.get("m", g))
        v = tmap(lambda a, b: b2 * b + (1 - b2) * a * a, g, self.get("v", g))
        self.s["m"], self.s["v"] = m, v
        if self.nesterov:
            m_hat = tmap(lambda mm, gg: b1 * mm / (1 - b1 ** (t + 1))
                         + (1 - b1) * gg / (1 - b1 ** t), m, g)
        else:
            m_hat = tmap(lambda mm: mm / (1 - b1 ** t), m)
        return tmap(lambda mh, vv: mh / (np.sqrt(vv / (1 - b2 ** t) + self.eps_root) + self.eps),
                    m_hat, v)


class Adam(AdamDir):
    def __init__(self, lr, weight_decay=0.0, **kw):
        super().__init__(**kw)
        self.lr, self.wd = lr, weight_decay

    def step(self, g, p, value):
        d = self.direction(g)
        return tmap(lambda a, b: -self.lr * (a + self.wd * b), d, p)


class Lamb(AdamDir):
    def __init__(self, lr, weight_decay=0.0, eps=1e-6):
        super().__init__(eps=eps)
        self.lr, self.wd = lr, weight_decay

    def step(self, g, p, value):
        d = tmap(lambda a, b: a + self.wd * b, self.direction(g), p)

        def trust(dd, pp):
            pn, dn = leaf_norm(pp), leaf_norm(dd)
            ratio = 1.0 if pn == 0 or dn == 0 else pn / dn
            return -self.lr * ratio * dd
        return tmap(trust, d, p)


class Adamax(Ref):
    def __init__(self, lr, b1=0.9, b2=0.999, eps=1e-8, weight_decay=0.0):
        super().__init__()
        self.lr, self.b1, self.b2, self.eps, self.wd = lr, b1, b2, eps, weight_decay

    def step(self, g, p, value):
        m = tmap(lambda a, b: self.b1 * b + (1 - self.b1) * a, g, self.get("m", g))
        u = tmap(lambda a, b: np.maximum(self.b2 * b, np.abs(a) + self.eps), g, self.get("u", g))
        self.s["m"], self.s["u"] = m, u
        return tmap(lambda mm, uu, pp: -self.lr * (mm / (1 - self.b1 ** self.t) / uu
                                                   + self.wd * pp), m, u, p)


class Amsgrad(Ref):
    def __init__(self, lr, b1=0.9, b2=0.999, eps=1e-8):
        super().__init__()
        self.lr, self.b1, self.b2, self.eps = lr, b1, b2, eps

    def step(self, g, p, value):
        b1, b2, t = self.b1, self.b2, self.t
        m = tmap(lambda a, b: b1 * b + (1 - b1) * a, g, self.get("m", g))
        v = tmap(lambda a, b: b2 * b + (1 - b2) * a * a, g, self.get("v", g))
        vmax = tmap(lambda a, b: np.maximum(a, b / (1 - b2 ** t)), self.get("vmax", g), v)
        self.s.update(m=m, v=v, vmax=vmax)
        return tmap(lambda mm, vm: -self.lr * (mm / (1 - b1 ** t)) / (np.sqrt(vm) + self.eps),
                    m, vmax)


class AdaBelief(Ref):
    def __init__(self, lr, b1=0.9, b2=0.999, eps=1e-16, eps_root=1e-16):
        super().__init__()
        self.lr, self.b1, self.b2, self.eps, self.eps_root = lr, b1, b2, eps, eps_root

    def step(self, g, p, value):
        b1, b2, t = self.b1, self.b2, self.t
        m = tmap(lambda a, b: b1 * b + (1 - b1) * a, g, self.get("m", g))
        s = tmap(lambda a, mm, ss: b2 * ss + (1 - b2) * (a - mm) ** 2 + self.eps_root,
                 g, m, self.get("s", g))
        self.s.update(m=m, s=s)
        return tmap(lambda mm, ss: -self.lr * (mm / (1 - b1 ** t))
                    / (np.sqrt(ss / (1 - b2 ** t)) + self.eps), m, s)


class Yogi(Ref):
    def __init__(self, lr, b1=0.9, b2=0.999, eps=1e-3, init=1e-6):
        super().__init__()
        self.lr, self.b1, self.b2, self.eps, self.init = lr, b1, b2, eps, init

    def step(self, g, p, value):
        b1, b2, t = self.b1, self.b2, self.t
        m = tmap(lambda a, b: b1 * b + (1 - b1) * a, g, self.get("m", g, self.init))
        v = tmap(lambda a, vv: vv - (1 - b2) * np.sign(vv - a * a) * a * a, g,
                 self.get("v", g, self.init))
        self.s.update(m=m, v=v)
        return tmap(lambda mm, vv: -self.lr * (mm / (1 - b1 ** t))
                    / (np.sqrt(vv / (1 - b2 ** t)) + self.eps), m, v)


class RAdam(Ref):
    def __init__(self, lr, b1=0.9, b2=0.999, eps=1e-8, threshold=5.0):
        super().__init__()
        self.lr, self.b1, self.b2, self.eps, self.thr = lr, b1, b2, eps, threshold

    def step(self, g, p, value):
        b1, b2, t = self.b1, self.b2, self.t
        m = tmap(lambda a, b: b1 * b + (1 - b1) * a, g, self.get("m", g))
        v = tmap(lambda a, b: b2 * b + (1 - b2) * a * a, g, self.get("v", g))
        self.s.update(m=m, v=v)
        rho_inf = 2 / (1 - b2) - 1
        rho = rho_inf - 2 * t * b2 ** t / (1 - b2 ** t)
        m_hat = tmap(lambda mm: mm / (1 - b1 ** t), m)
        if rho < self.thr:
            return tmap(lambda mh: -self.lr * mh, m_hat)
        r = np.sqrt((rho - 4) * (rho - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho))
        return tmap(lambda mh, vv: -self.lr * r * mh / (np.sqrt(vv / (1 - b2 ** t)) + self.eps),
                    m_hat, v)


class Adagrad(Ref):
    def __init__(self, lr, init=0.1, eps=1e-7):
        super().__init__()
        self.lr, self.init, self.eps = lr, init, eps

    def step(self, g, p, value):
        s = tmap(lambda a, b: b + a * a, g, self.get("s", g, self.init))
        self.s["s"] = s
        return tmap(lambda a, ss: -self.lr * a / np.sqrt(ss + self.eps), g, s)


class Adadelta(Ref):
    def __init__(self, lr, rho=0.9, eps=1e-6, weight_decay=0.0):
        super().__init__()
        self.lr, self.rho, self.eps, self.wd = lr, rho, eps, weight_decay

    def step(self, g, p, value):
        rho, eps = self.rho, self.eps
        g = tmap(lambda a, b: a + self.wd * b, g, p)
        eg = tmap(lambda a, b: rho * b + (1 - rho) * a * a, g, self.get("eg", g))
        dx = tmap(lambda a, e, x: np.sqrt(x + eps) / np.sqrt(e + eps) * a, g, eg,
                  self.get("ex", g))
        ex = tmap(lambda d, x: rho * x + (1 - rho) * d * d, dx, self.get("ex", g))
        self.s.update(eg=eg, ex=ex)
        return tmap(lambda d: -self.lr * d, dx)


class Adan(Ref):
    def __init__(self, lr, b1=0.98, b2=0.92, b3=0.99, eps=1e-8, eps_root=1e-8, weight_decay=0.0):
        super().__init__()
        self.lr, self.b, self.eps, self.eps_root, self.wd = lr, (b1, b2, b3), eps, eps_root, \
            weight_decay

    def step(self, g, p, value):
        b1, b2, b3 = self.b
        t = self.t
        gp = self.s.get("gprev", g)
        diff = tmap(lambda a, b: a - b, g, gp)
        m = tmap(lambda a, b: b1 * b + (1 - b1) * a, g, self.get("m", g))
        v = tmap(lambda a, b: b2 * b + (1 - b2) * a, diff, self.get("v", g))
        n = tmap(lambda a, d, b: b3 * b + (1 - b3) * (a + (1 - b2) * d) ** 2, g, diff,
                 self.get("n", g))
        self.s.update(m=m, v=v, n=n, gprev=g)
        return tmap(lambda mm, vv, nn, pp: -self.lr * (
            (mm / (1 - b1 ** t) + (1 - b2) * vv / (1 - b2 ** t))
            / (np.sqrt(nn / (1 - b3 ** t) + self.eps_root) + self.eps) + self.wd * pp),
            m, v, n, p)


class Novograd(Ref):
    def __init__(self, lr, b1=0.9, b2=0.25, eps=1e-6, weight_decay=0.0):
        super().__init__()
        self.lr, self.b1, self.b2, self.eps, self.wd = lr, b1, b2, eps, weight_decay

    def step(self, g, p, value):
        out = {}
        for k in g:
            sq = float(np.sum(g[k] ** 2))
            n = sq if self.t == 1 else self.b2 * self.s[("n", k)] + (1 - self.b2) * sq
            a = g[k] / (np.sqrt(n) + self.eps) + self.wd * p[k]
            m = a if self.t == 1 else self.b1 * self.s[("m", k)] + a
            self.s[("n", k)], self.s[("m", k)] = n, m
            out[k] = -self.lr * m
        return out


class Lion(Ref):
    def __init__(self, lr, b1=0.9, b2=0.99, weight_decay=1e-3):
        super().__init__()
        self.lr, self.b1, self.b2, self.wd = lr, b1, b2, weight_decay

    def step(self, g, p, value):
        m = self.get("m", g)
        c = tmap(lambda a, b: np.sign((1 - self.b1) * a + self.b1 * b), g, m)
        self.s["m"] = tmap(lambda a, b: self.b2 * b + (1 - self.b2) * a, g, m)
        return tmap(lambda cc, pp: -self.lr * (cc + self.wd * pp), c, p)


class Rmsprop(Ref):
    def __init__(self, lr, decay=0.9, eps=1e-8):
        super().__init__()
        self.lr, self.decay, self.eps = lr, decay, eps

    def step(self, g, p, value):
        nu = tmap(lambda a, b: self.decay * b + (1 - self.decay) * a * a, g, self.get("nu", g))
        self.s["nu"] = nu
        return tmap(lambda a, n: -self.lr * a / np.sqrt(n + self.eps), g, nu)


class Rprop(Ref):
    """iRprop- (Igel & Huesken, 2000), the variant optax implements."""

    def __init__(self, lr, eta_minus=0.5, eta_plus=1.2, min_step=1e-6, max_step=50.0):
        super().__init__()
        self.lr, self.em, self.ep, self.lo, self.hi = lr, eta_minus, eta_plus, min_step, max_step

    def step(self, g, p, value):
        out = {}
        for k in g:
            gk = g[k].copy()
            prev = self.s.get(("g", k), np.zeros_like(gk))
            step = self.s.get(("step", k), np.full_like(gk, self.lr))
            prod = gk * prev
            step = np.where(prod > 0, np.minimum(step * self.ep, self.hi),
                            np.where(prod < 0, np.maximum(step * self.em, self.lo), step))
            gk = np.where(prod < 0, 0.0, gk)
            self.s[("g", k)], self.s[("step", k)] = gk, step
            out[k] = -np.sign(gk) * step
        return out


class SignSgd(Ref):
    def __init__(self, lr, beta=None):
        super().__init__()
        self.lr, self.beta = lr, beta

    def step(self, g, p, value):
        if self.beta is None:
            return tmap(lambda a: -self.lr * np.sign(a), g)
        m = tmap(lambda a, b: self.beta * b + (1 - self.beta) * a, g, self.get("m", g))
        self.s["m"] = m
        return tmap(lambda a: -self.lr * np.sign(a), m)


class Sm3(Ref):
    """SM3-II (Anil et al., 2019) with momentum on the preconditioned gradient."""

    def __init__(self, lr, momentum=0.9, eps=1e-8):
        super().__init__()
        self.lr, self.b1, self.eps = lr, momentum, eps

    def step(self, g, p, value):
        out = {}
        for k, gk in g.items():
            if gk.ndim < 2:
                acc = self.s.get(("acc", k), np.zeros_like(gk)) + gk ** 2
                self.s[("acc", k)] = acc
            else:
                rows = self.s.get(("r", k), np.zeros(gk.shape[0]))
                cols = self.s.get(("c", k), np.zeros(gk.shape[1]))
                acc = np.minimum(rows[:, None], cols[None, :]) + gk ** 2
                self.s[("r", k)], self.s[("c", k)] = acc.max(axis=1), acc.max(axis=0)
            pre = np.where(acc > 0, gk / np.sqrt(acc + self.eps), 0.0)
            m = self.b1 * self.s.get(("m", k), np.zeros_like(gk)) + (1 - self.b1) * pre
            self.s[("m", k)] = m
            out[k] = -self.lr * m
        return out


class Fromage(Ref):
    """Fromage (Bernstein et al., 2020): p <- (p - lr ||p|| / ||g|| g) / sqrt(1 + lr^2)."""

    def __init__(self, lr, min_norm=1e-6):
        super().__init__()
        self.lr, self.min_norm = lr, min_norm

    def step(self, g, p, value):
        def one(gg, pp):
            pn = max(leaf_norm(pp), self.min_norm)
            gn = max(leaf_norm(gg), self.min_norm)
            new = (pp - self.lr * pn / gn * gg) / np.sqrt(1 + self.lr ** 2)
            return new - pp
        return tmap(one, g, p)


class Lars(Ref):
    def __init__(self, lr, weight_decay=0.0, tc=0.001, momentum=0.9):
        super().__init__()
        self.lr, self.wd, self.tc, self.mu = lr, weight_decay, tc, momentum

    def step(self, g, p, value):
        def one(gg, pp):
            d = gg + self.wd * pp
            pn, dn = leaf_norm(pp), leaf_norm(d)
            ratio = 1.0 if pn == 0 or dn == 0 else self.tc * pn / dn
            return -self.lr * ratio * d
        scaled = tmap(one, g, p)
        tr = tmap(lambda a, b: a + self.mu * b, scaled, self.get("tr", g))
        self.s["tr"] = tr
        return tr


class Polyak(Ref):
    def __init__(self, max_lr=1.0, f_min=0.0, eps=0.0):
        super().__init__()
        self.max_lr, self.f_min, self.eps = max_lr, f_min, eps

    def step(self, g, p, value):
        sq = vdot(g, g)
        step = 0.0 if sq + self.eps <= np.finfo(float).eps else \
            min((value - self.f_min) / (sq + self.eps), self.max_lr)
        return tmap(lambda a: -step * a, g)


class Optimistic(Ref):
    def __init__(self, lr, alpha=1.0, beta=1.0, inner=None):
        super().__init__()
        self.lr, self.a, self.b, self.inner = lr, alpha, beta, inner

    def step(self, g, p, value):
        if self.inner is not None:
            self.inner.t = self.t
            g = self.inner.direction(g)
        prev = self.s.get("prev", g)
        self.s["prev"] = g
        return tmap(lambda a, b: -self.lr * ((self.a + self.b) * a - self.b * b), g, prev)


class Adafactor(Ref):
    """Adafactor (Shazeer & Stern, 2018) as optax composes it: factored (or full) RMS,
    block-RMS clipping at 1, the learning rate, times max(rms(param), 1e-3)."""

    def __init__(self, lr, min_dim=128, decay_rate=0.8, eps=1e-30, clip=1.0):
        super().__init__()
        self.lr, self.min_dim, self.dr, self.eps, self.clip = lr, min_dim, decay_rate, eps, clip

    def step(self, g, p, value):
        # optax computes Adafactor's decay 1 - t**(-0.8) in float32, even for float64 params
        decay = float(np.float32(1.0) - np.float32(self.t) ** np.float32(-self.dr))
        out = {}
        for k, gk in g.items():
            sq = gk ** 2 + self.eps
            if gk.ndim == 2 and min(gk.shape) >= self.min_dim:
                assert gk.shape[0] <= gk.shape[1]
                r = decay * self.s.get(("r", k), 0.0) + (1 - decay) * sq.mean(axis=1)
                c = decay * self.s.get(("c", k), 0.0) + (1 - decay) * sq.mean(axis=0)
                self.s[("r", k)], self.s[("c", k)] = r, c
                v_hat = np.outer(r, c) / r.mean()
            else:
                v_hat = decay * self.s.get(("v", k), 0.0) + (1 - decay) * sq
                self.s[("v", k)] = v_hat
            u = gk / np.sqrt(v_hat)
            u = u / max(1.0, np.sqrt(np.mean(u ** 2)) / self.clip)
            out[k] = -self.lr * u * max(np.sqrt(np.mean(p[k] ** 2)), 1e-3)
        return out


def zoom_linesearch(phi, value0, slope0, grad0, guess, max_steps, c1=1e-4, c2=0.9,
                    approx_rtol=1e-6, inc=2.0, precision=1e-5):
    """The zoom line search (Nocedal & Wright Alg. 3.5-3.6) as optax documents it: bracket by
    doubling, then zoom by cubic / quadratic / bisection; Hager-Zhang's approximate decrease
    test; when it fails, the best step with sufficient decrease. ``phi(a) -> (f, f', grad)``.
    Returns (step, value, grad)."""
    def dec_err(a, v, s):
        e = v - value0 - c1 * a * slope0
        e = min(e, max(s - (2 * c1 - 1) * slope0, v - value0 - approx_rtol * abs(value0)))
        return np.inf if np.isnan(e) else max(e, 0.0)

    def curv_err(s):
        e = abs(s) - c2 * abs(slope0)
        return np.inf if np.isnan(e) else max(e, 0.0)
    a, v, s, g = 0.0, value0, slope0, grad0
    lo = hi = ref = (0.0, value0, slope0)
    safe = (0.0, value0, grad0)
    found, count, dec = False, 0, np.inf
    while True:
        if not found:  # bracketing
            a_new = guess if count == 0 else inc * a
            v_new, s_new, g_new = phi(a_new)
            dec, err = dec_err(a_new, v_new, s_new), 0.0
            err = max(dec, curv_err(s_new))
            if dec <= 0:
                safe = (a_new, v_new, g_new)
            set_high = dec > 0 or (v_new >= v and count > 0)
            set_low = s_new >= 0 and not set_high
            if set_low:
                lo, hi = (a_new, v_new, s_new), (a, v, s)
            else:
                lo, hi = (a, v, s), (a_new, v_new, s_new)
            ref = lo
            found = set_high or set_low or err <= 0
            done = err <= 0
            failed = count + 1 >= max_steps and not done
        else:  # zoom
            delta = abs(hi[0] - lo[0])
            left, right = min(hi[0], lo[0]), max(hi[0], lo[0])
            db, dc = np.float64(hi[0] - lo[0]), np.float64(ref[0] - lo[0])
            r1 = hi[1] - lo[1] - lo[2] * db
            r2 = ref[1] - lo[1] - lo[2] * dc
            den = (db * dc) ** 2 * (db - dc)
            with np.errstate(all="ignore"):
                A = (dc ** 2 * r1 - db ** 2 * r2) / den
                B = (-dc ** 3 * r1 + db ** 3 * r2) / den
                cubic = lo[0] + (-B + np.sqrt(B * B - 3 * A * lo[2])) / (3 * A)
                quad = lo[0] - lo[2] / (2 * ((hi[1] - lo[1] - lo[2] * db) / db ** 2))
            if left + 0.2 * delta < cubic < right - 0.2 * delta:
                a_new = cubic
            elif left + 0.1 * delta < quad < right - 0.1 * delta:
                a_new = quad
            else:
                a_new = (lo[0] + hi[0]) / 2
            v_new, s_new, g_new = phi(a_new)
            dec = dec_err(a_new, v_new, s_new)
            err = max(dec, curv_err(s_new))
            if dec <= 0 and v_new < safe[1]:
                safe = (a_new, v_new, g_new)
            done = err <= 0
            high_to_mid = dec > 0 or v_new >= lo[1]
            high_to_low = s_new * (hi[0] - lo[0]) >= 0 and not high_to_mid
            new_hi = lo if high_to_low else ((a_new, v_new, s_new) if high_to_mid else hi)
            new_lo = lo if high_to_mid else (a_new, v_new, s_new)
            ref = hi if (high_to_mid or high_to_low) else lo
            lo, hi = new_lo, new_hi
            failed = (count + 1 >= max_steps or (delta <= precision and safe[0] > 0)) \
                and not done
        count += 1
        a, v, s, g = a_new, v_new, s_new, g_new
        if failed and (safe[0] > 0 or np.isinf(dec)):
            a, v, g = safe
        if done or failed:
            return a, v, g


class Lbfgs(Ref):
    """L-BFGS (Nocedal & Wright, Alg. 7.4) with the zoom line search from step 1
    (``linesearch='zoom'``), or an Armijo backtracking search started at min(1.5 * previous
    step, 1) and shrunk by 0.8 (``linesearch=True``), or none."""

    def __init__(self, value_fn, memory=10, lr=None, linesearch=True, max_steps=20,
                 grad_fn=None):
        super().__init__()
        self.f, self.m, self.lr, self.ls, self.max_steps = value_fn, memory, lr, linesearch, \
            max_steps
        self.grad_fn = grad_fn
        self.pairs = []
        self.prev_step = 1.0

    def step(self, g, p, value):
        keys = list(g)
        flat = lambda d: np.concatenate([np.ravel(d[k]) for k in keys])  # noqa: E731
        x, gv = flat(p), flat(g)
        if self.t == 1:
            self.pairs.append((np.zeros_like(x), np.zeros_like(x)))
        else:
            self.pairs.append((x - self.x_prev, gv - self.g_prev))
        self.pairs = self.pairs[-self.m:]
        self.x_prev, self.g_prev = x, gv
        q, alphas = gv.copy(), []
        for s, y in reversed(self.pairs):
            rho = 0.0 if s @ y == 0 else 1.0 / (s @ y)
            a = rho * (s @ q)
            q = q - a * y
            alphas.append((rho, a))
        s, y = self.pairs[-1]
        if self.t == 1:
            gamma = min(1.0, 1.0 / np.linalg.norm(gv))
        else:
            gamma = (s @ y) / (y @ y) if y @ y > 0 else 1.0
        r = gamma * q
        for (s, y), (rho, a) in zip(self.pairs, reversed(alphas)):
            r = r + (a - rho * (y @ r)) * s
        d = -(r if self.lr is None else self.lr * r)
        if self.ls == "zoom":
            def phi(a):
                trial = self.unflat(x + a * d, p)
                gt = flat(self.grad_fn(trial))
                return self.f(trial), float(gt @ d), gt
            a, _, _ = zoom_linesearch(phi, value, float(gv @ d), gv, 1.0, self.max_steps)
            d = a * d
        elif self.ls:
            lr0 = min(1.5 * self.prev_step, 1.0)
            slope = d @ gv
            a = lr0
            for i in range(self.max_steps + 1):
                if i > 0:
                    a *= 0.8
                trial = self.unflat(x + a * d, p)
                err = max(self.f(trial) - value - a * 1e-4 * slope, 0.0)
                if err <= 0:
                    break
            self.prev_step = a
            d = a * d
        return self.unflat(d, p)

    @staticmethod
    def unflat(vec, like):
        out, i = {}, 0
        for k, v in like.items():
            out[k] = vec[i:i + v.size].reshape(v.shape)
            i += v.size
        return out


# ---------------------------------------------------------------------------------------------
# problems: loss in funcgrad, loss and gradient in numpy
# ---------------------------------------------------------------------------------------------

QC = {"w": np.array([1.0, 2.0, 0.5]), "m": np.array([[1.0, 3.0, 0.2], [2.0, 0.7, 1.5]])}
QT = {"w": np.array([0.3, -0.2, 1.0]), "m": np.array([[0.5, 0.1, -0.4], [0.0, 0.9, 0.2]])}
QP0 = {"w": np.array([0.5, -1.0, 2.0]), "m": np.array([[1.0, -0.5, 0.3], [-2.0, 0.8, 1.2]])}
RP0 = {"xy": np.array([-1.2, 1.0])}


def quad_fg(p):
    return sum(0.5 * fnp.sum(QC[k] * (p[k] - QT[k]) ** 2) for k in ("w", "m"))


def quad_np(p):
    return sum(0.5 * float(np.sum(QC[k] * (p[k] - QT[k]) ** 2)) for k in ("w", "m"))


def quad_grad(p):
    return {k: QC[k] * (p[k] - QT[k]) for k in p}


def rosen_fg(p):
    x, y = p["xy"][0], p["xy"][1]
    return (1 - x) ** 2 + 100 * (y - x ** 2) ** 2


def rosen_np(p):
    x, y = p["xy"]
    return float((1 - x) ** 2 + 100 * (y - x ** 2) ** 2)


def rosen_grad(p):
    x, y = p["xy"]
    return {"xy": np.array([-2 * (1 - x) - 400 * x * (y - x ** 2), 200 * (y - x ** 2)])}


PROBLEMS = {"quadratic": (quad_fg, quad_np, quad_grad, QP0),
            "rosenbrock": (rosen_fg, rosen_np, rosen_grad, RP0)}


def to_fg(tree):
    return {k: fnp.asarray(np.asarray(v, np.float64)) for k, v in tree.items()}


def run_funcgrad(opt, problem, steps, extra=None, jit=False):
    loss, _, _, p0 = PROBLEMS[problem]
    params = to_fg(p0)
    state = opt.init(params)

    def step(params, state):
        value, grads = funcgrad.value_and_grad(loss)(params)
        kw = extra(value, loss) if extra else {}
        updates, state = opt.update(grads, state, params, **kw)
        return optim.apply_updates(params, updates), state
    if jit:
        step = funcgrad.jit(step)
    traj = []
    for _ in range(steps):
        params, state = step(params, state)
        traj.append({k: np.asarray(v, np.float64) for k, v in params.items()})
    return traj


def run_numpy(ref, problem, steps):
    _, loss, grad, p0 = PROBLEMS[problem]
    p = {k: np.asarray(v, np.float64).copy() for k, v in p0.items()}
    traj = []
    for _ in range(steps):
        u = ref(grad(p), p, loss(p))
        p = {k: p[k] + u[k] for k in p}
        traj.append({k: v.copy() for k, v in p.items()})
    return traj
