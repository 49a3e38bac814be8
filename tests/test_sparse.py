"""Sparse COO tensors: construction, coalesce, to_dense, to_sparse and sparse @ dense.

Compared with PyTorch (values, coalesced indices, results and gradients) where torch is
installed; gradients are checked by ``ta.gradcheck``; what tinyattn leaves out is refused by
name. A two-layer graph network trains on a sparse adjacency as PyTorch's does.
"""

import numpy as np
import pytest

import tinyattn as ta

INDICES = [[0, 1, 1, 2, 0, 3], [2, 0, 2, 1, 2, 3]]  # (0, 2) appears twice
VALUES = [3.0, 4.0, 5.0, 6.0, 1.0, -2.0]


def _torch():
    return pytest.importorskip("torch")


def _sparse(requires_grad=False):
    values = ta.tensor(VALUES, dtype="float64", requires_grad=requires_grad)
    return ta.sparse_coo_tensor(INDICES, values, (4, 4)), values


def test_construction_and_queries():
    s, _ = _sparse()
    assert s.is_sparse and not ta.zeros(2).is_sparse
    assert s.shape == s.size() == (4, 4) and s.dim() == 2 and s._nnz() == 6
    assert s.sparse_dim() == 2 and s.dense_dim() == 0 and not s.is_coalesced()
    assert s._indices().tolist() == INDICES and s._values().tolist() == VALUES
    inferred = ta.sparse_coo_tensor(INDICES, VALUES)  # size from the largest indices
    assert inferred.shape == (4, 4)
    with pytest.raises(RuntimeError, match="uncoalesced tensor, please call .coalesce"):
        s.values()


def test_coalesce_and_to_dense():
    s, _ = _sparse()
    dense = np.zeros((4, 4))
    np.add.at(dense, tuple(np.array(INDICES)), VALUES)
    np.testing.assert_array_equal(s.to_dense().numpy(), dense)
    c = s.coalesce()
    assert c.is_coalesced() and c.indices().tolist() == [[0, 1, 1, 2, 3], [2, 0, 2, 1, 3]]
    assert c.values().tolist() == [4.0, 4.0, 5.0, 6.0, -2.0]
    np.testing.assert_array_equal(c.to_dense().numpy(), dense)
    back = ta.tensor(dense).to_sparse()
    assert back.indices().tolist() == c.indices().tolist()


def test_sparse_times_dense_and_its_gradients():
    s, values = _sparse(requires_grad=True)
    dense = ta.tensor(np.random.default_rng(0).standard_normal((4, 3)), requires_grad=True)
    np.testing.assert_allclose(
        (s @ dense).detach().numpy(), s.to_dense().detach().numpy() @ dense.detach().numpy()
    )
    assert ta.gradcheck(lambda v, d: ta.sparse_coo_tensor(INDICES, v, (4, 4)) @ d, (values, dense))
    assert ta.gradcheck(
        lambda v, d: ta.sparse.mm(ta.sparse_coo_tensor(INDICES, v, (4, 4)), d), (values, dense)
    )
    assert ta.gradcheck(lambda v: ta.sparse_coo_tensor(INDICES, v, (4, 4)).to_dense(), (values,))
    assert ta.gradcheck(
        lambda v: ta.sparse_coo_tensor(INDICES, v, (4, 4)).coalesce().values(), (values,)
    )
    # to_sparse's pattern moves under finite differences at the zeros: backward directly.
    x = ta.tensor([[0.0, 1.5], [2.0, 0.0]], requires_grad=True)
    (x.to_sparse().values() * ta.tensor([3.0, 5.0])).sum().backward()
    assert x.grad.tolist() == [[0.0, 3.0], [5.0, 0.0]]


def test_function_spellings():
    s, _ = _sparse()
    dense = ta.ones(4, 2, dtype="float64")
    expected = (s @ dense).numpy()
    for result in (ta.mm(s, dense), ta.spmm(s, dense), ta.sparse.mm(s, dense), s.mm(dense)):
        np.testing.assert_array_equal(result.numpy(), expected)


@pytest.mark.parametrize(
    "call, error, message",
    [
        (lambda s: s + s, RuntimeError, "add\\(sparse, dense\\) is not supported"),
        (lambda s: s + ta.eye(4, dtype="float64"), RuntimeError, "Use add\\(dense, sparse\\)"),
        (lambda s: 1.0 - s, RuntimeError, "add\\(sparse, dense\\)"),
        (lambda s: s * 2.0, NotImplementedError, "sparse \\* x"),
        (lambda s: s @ s, NotImplementedError, "sparse @ sparse"),
        (lambda s: s.sum(), AttributeError, "'sum' is not supported on sparse tensors"),
        (lambda s: ta.zeros(2, 2).to_sparse_csr(), NotImplementedError, "to_sparse_csr"),
        (lambda s: ta.zeros(2, 2).to_sparse(layout="sparse_csr"), NotImplementedError, "COO"),
        (lambda s: s @ ta.ones(3, 2, dtype="float64"), RuntimeError, "cannot be multiplied"),
        (lambda s: s @ ta.ones(4, 2), RuntimeError, "same dtype"),
        (lambda s: ta.sparse_coo_tensor([[0, 5]], [1.0, 2.0], (3,)), RuntimeError, "out of bounds"),
        (lambda s: ta.sparse_coo_tensor([[0, 1]], [1.0], (3,)), RuntimeError, "nnz"),
    ],
)
def test_refusals(call, error, message):
    s, _ = _sparse()
    with pytest.raises(error, match=message):
        call(s)


def test_dense_plus_minus_and_times_sparse_are_dense_as_in_torch():
    """dense + sparse, dense - sparse and dense @ sparse give dense tensors (PyTorch's meaning),
    with gradients to the dense operand and the stored values."""
    s, values = _sparse(requires_grad=True)
    dense = ta.tensor(np.arange(16.0).reshape(4, 4), requires_grad=True)
    (dense + s).sum().backward()
    assert dense.grad.tolist() == np.ones((4, 4)).tolist() and values.grad.tolist() == [1.0] * 6
    as_dense = s.to_dense().detach().numpy()
    np.testing.assert_array_equal((dense - s).detach().numpy(), dense.detach().numpy() - as_dense)
    np.testing.assert_array_equal((dense @ s).detach().numpy(), dense.detach().numpy() @ as_dense)
    torch = _torch()
    values64 = torch.tensor(VALUES, dtype=torch.float64)
    theirs = torch.sparse_coo_tensor(torch.tensor(INDICES), values64, (4, 4))
    t_dense = torch.arange(16.0, dtype=torch.float64).reshape(4, 4)
    for op in (lambda a, b: a + b, lambda a, b: a - b, lambda a, b: a @ b):
        np.testing.assert_allclose(op(dense, s).detach().numpy(), op(t_dense, theirs).numpy())


# ------------------------------------------------------------------------------ against torch
def test_matches_torch():
    torch = _torch()
    rng = np.random.default_rng(1)
    dense_values = rng.standard_normal((4, 3))
    cotangent = rng.standard_normal((4, 3))
    ours_v = ta.tensor(VALUES, dtype="float64", requires_grad=True)
    theirs_v = torch.tensor(VALUES, dtype=torch.float64, requires_grad=True)
    ours_d, theirs_d = (
        ta.tensor(dense_values, requires_grad=True),
        torch.tensor(dense_values, requires_grad=True),
    )
    ours = ta.sparse.mm(ta.sparse_coo_tensor(INDICES, ours_v, (4, 4)), ours_d)
    theirs = torch.sparse.mm(torch.sparse_coo_tensor(INDICES, theirs_v, (4, 4)), theirs_d)
    np.testing.assert_allclose(ours.detach().numpy(), theirs.detach().numpy(), rtol=1e-12)
    ours.backward(ta.tensor(cotangent))
    theirs.backward(torch.tensor(cotangent))
    np.testing.assert_allclose(ours_v.grad.numpy(), theirs_v.grad.numpy(), rtol=1e-12)
    np.testing.assert_allclose(ours_d.grad.numpy(), theirs_d.grad.numpy(), rtol=1e-12)
    ours_c = ta.sparse_coo_tensor(INDICES, VALUES, (4, 4)).coalesce()
    theirs_c = torch.sparse_coo_tensor(INDICES, VALUES, (4, 4)).coalesce()
    assert ours_c.indices().tolist() == theirs_c.indices().tolist()
    np.testing.assert_allclose(ours_c.values().numpy(), theirs_c.values().numpy())
    matrix = rng.standard_normal((3, 5)) * (rng.random((3, 5)) < 0.4)
    ours_s, theirs_s = ta.tensor(matrix).to_sparse(), torch.tensor(matrix).to_sparse()
    assert ours_s.indices().tolist() == theirs_s.indices().tolist()
    np.testing.assert_array_equal(ours_s.values().numpy(), theirs_s.values().numpy())


def _gcn_losses(lib, nn, adjacency, features, labels, weights):
    """Two graph-convolution layers, out = A relu(A X W1) W2, trained by SGD for 5 steps."""
    w1, w2 = (lib.tensor(w, requires_grad=True) for w in weights)
    optimizer = lib.optim.SGD([w1, w2], lr=0.5)
    losses = []
    for _ in range(5):
        hidden = lib.sparse.mm(adjacency, features @ w1).relu()
        logits = lib.sparse.mm(adjacency, hidden @ w2)
        loss = nn.functional.cross_entropy(logits, labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def test_a_graph_network_trains_as_in_torch():
    torch = _torch()
    rng = np.random.default_rng(2)
    n, f, h, c = 6, 4, 5, 2
    edges = np.array([[0, 1, 1, 2, 3, 4, 4, 5, 0, 5], [1, 0, 2, 1, 4, 3, 5, 4, 0, 5]])
    degree = np.bincount(edges[0], minlength=n).astype(np.float64)
    weights_a = 1.0 / degree[edges[0]]  # row-normalised adjacency
    features, labels = rng.standard_normal((n, f)), np.array([0, 0, 0, 1, 1, 1])
    weights = (rng.standard_normal((f, h)) * 0.5, rng.standard_normal((h, c)) * 0.5)
    ours = _gcn_losses(
        ta,
        ta.nn,
        ta.sparse_coo_tensor(edges.tolist(), weights_a, (n, n)),
        ta.tensor(features),
        ta.tensor(labels),
        weights,
    )
    theirs = _gcn_losses(
        torch,
        torch.nn,
        torch.sparse_coo_tensor(edges.tolist(), weights_a, (n, n)),
        torch.tensor(features),
        torch.tensor(labels),
        weights,
    )
    np.testing.assert_allclose(ours, theirs, rtol=1e-10)
    assert ours[-1] < ours[0]
