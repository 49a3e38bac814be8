"""PyTorch names: the ones tinyattn lacks say so, and small gaps closed with PyTorch's meaning.

A missing name on ``tinyattn``, ``tinyattn.Tensor`` or ``tinyattn.nn.functional`` raises an
AttributeError (``hasattr`` and ``getattr`` with a default keep working) that says it is not in
tinyattn and what to use instead. Also here: ``set_num_threads``/``get_num_threads``,
``randint`` with its lone bound as ``high``, and a Python ``range`` as an index.
"""

import numpy as np
import pytest

import tinyattn as ta
import tinyattn.nn.functional as F


@pytest.mark.parametrize(
    "owner, name, message",
    [
        (ta, "take_along_dim", "tinyattn has no 'take_along_dim' .*use x.gather"),
        (ta.zeros(2), "ravel", "tinyattn.Tensor has no 'ravel' .*use x.reshape\\(-1\\)"),
        (F, "pdist", "tinyattn.nn.functional has no 'pdist' .*ta.cdist"),
        (ta, "softmaxx", "not in tinyattn .*did you mean 'softmax'"),
        (ta.zeros(2), "det", "no linear algebra"),
    ],
)
def test_a_missing_name_says_so_and_what_to_use(owner, name, message):
    with pytest.raises(AttributeError, match=message):
        getattr(owner, name)
    assert not hasattr(owner, name)
    assert getattr(owner, name, "default") == "default"


def test_private_names_keep_pythons_message():
    with pytest.raises(AttributeError, match="'Tensor' object has no attribute '_nothing'"):
        ta.zeros(1)._nothing  # noqa: B018
    with pytest.raises(AttributeError, match="module 'tinyattn' has no attribute '_nothing'"):
        ta._nothing  # noqa: B018


def test_num_threads_round_trip():
    before = ta.get_num_threads()
    try:
        ta.set_num_threads(1)
        assert ta.get_num_threads() == 1
    finally:
        ta.set_num_threads(before)
    assert ta.get_num_threads() == before
    with pytest.raises(RuntimeError, match="set_num_threads expects a positive integer"):
        ta.set_num_threads(0)


def test_importing_changes_no_thread_setting():
    import subprocess
    import sys

    code = (
        "import numpy; from threadpoolctl import threadpool_info as i; "
        "a = [p['num_threads'] for p in i()]; "
        "import tinyattn; assert a == [p['num_threads'] for p in i()], a"
    )
    pytest.importorskip("threadpoolctl")
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize(
    "call",
    [
        lambda lib: lib.randint(10, (2000,)),
        lambda lib: lib.randint(10, size=(2000,)),
        lambda lib: lib.randint(high=10, size=(2000,)),
        lambda lib: lib.randint(3, 10, (2000,)),
    ],
)
def test_randint_lone_bound_is_high(call):
    ta.manual_seed(0)
    values = call(ta).numpy()
    low = 3 if values.min() >= 3 else 0
    assert values.dtype == np.int64 and set(np.unique(values)) == set(range(low, 10))
    torch = pytest.importorskip("torch")
    drawn = call(torch).numpy()  # the same range from PyTorch for the same call
    assert set(np.unique(drawn)) == set(np.unique(values))


def test_range_as_an_index():
    x = ta.arange(12.0).reshape(3, 4)
    assert x[range(2)].tolist() == x[[0, 1]].tolist()
    assert x[:, range(1, 3)].tolist() == [[1.0, 2.0], [5.0, 6.0], [9.0, 10.0]]
    y = x.clone()
    y[range(1, 3), 0] = -1.0
    assert y[:, 0].tolist() == [0.0, -1.0, -1.0]
    torch = pytest.importorskip("torch")
    t = torch.arange(12.0).reshape(3, 4)
    assert x[range(2), range(1, 3)].tolist() == t[range(2), range(1, 3)].tolist()
