#include "harness/internal/coll_table.hpp"

#include <stdexcept>
#include <string>

namespace sax::harness {

namespace {

using coll::Communicator;
using coll::Handle;
using coll::Mode;

std::size_t whole(std::size_t count, int) { return count; }
std::size_t per_rank(std::size_t count, int n) { return count / static_cast<std::size_t>(n); }
std::size_t at_start(std::size_t, int, int) { return 0; }
std::size_t own_block(std::size_t count, int n, int r) {
  return static_cast<std::size_t>(r) * (count / static_cast<std::size_t>(n));
}

double own(int r, int, std::size_t, std::size_t i) { return check_value(r, i); }
double sum_at(int n, std::size_t k) {
  double s = 0;
  for (int r = 0; r < n; ++r) s += check_value(r, k);
  return s;
}

const CollOpEntry kTable[] = {
    {CollOp::all_reduce, whole, whole,
     [](Communicator& c, const void* s, void* r, std::size_t count, DType d, Mode m) {
       return c.all_reduce(s, r, count, d, m);
     },
     false, at_start, at_start, own, [](int, int n, std::size_t, std::size_t i) { return sum_at(n, i); }},
    {CollOp::all_gather, per_rank, whole,
     [](Communicator& c, const void* s, void* r, std::size_t count, DType d, Mode m) {
       return c.all_gather(s, r, count / static_cast<std::size_t>(c.size()), d, m);
     },
     false, own_block, at_start, own,
     [](int, int n, std::size_t count, std::size_t i) {
       const std::size_t block = count / static_cast<std::size_t>(n);
       return check_value(static_cast<int>(i / block), i % block);
     }},
    {CollOp::reduce_scatter, whole, per_rank,
     [](Communicator& c, const void* s, void* r, std::size_t count, DType d, Mode m) {
       return c.reduce_scatter(s, r, count / static_cast<std::size_t>(c.size()), d, m);
     },
     false, at_start, own_block, own,
     [](int r, int n, std::size_t count, std::size_t i) {
       return sum_at(n, static_cast<std::size_t>(r) * (count / static_cast<std::size_t>(n)) + i);
     }},
    {CollOp::all_to_all, whole, whole,
     [](Communicator& c, const void* s, void* r, std::size_t count, DType d, Mode m) {
       return c.all_to_all(s, r, count / static_cast<std::size_t>(c.size()), d, m);
     },
     false, nullptr, nullptr, own,
     [](int r, int n, std::size_t count, std::size_t i) {
       const std::size_t block = count / static_cast<std::size_t>(n);
       return check_value(static_cast<int>(i / block), static_cast<std::size_t>(r) * block + i % block);
     }},
    // Root 0 holds the data; the others start from a value no rank sends (5), so a missed
    // broadcast is seen.
    {CollOp::broadcast, whole, whole,
     [](Communicator& c, const void*, void* r, std::size_t count, DType d, Mode m) {
       return c.broadcast(r, count, d, 0, m);
     },
     true, nullptr, nullptr, [](int r, int, std::size_t, std::size_t i) { return r == 0 ? check_value(0, i) : 5.0; },
     [](int, int, std::size_t, std::size_t i) { return check_value(0, i); }},
    // A ring exchange, as nccl-tests' sendrecv: send to rank+1, receive from rank-1.
    {CollOp::send_recv, whole, whole,
     [](Communicator& c, const void* s, void* r, std::size_t count, DType d, Mode m) {
       const int n = c.size(), me = c.rank();
       return c.send_recv(s, (me + 1) % n, r, (me + n - 1) % n, count, d, m);
     },
     false, nullptr, nullptr, own,
     [](int r, int n, std::size_t, std::size_t i) { return check_value((r + n - 1) % n, i); }},
};

}  // namespace

std::vector<bool> placements(const CollOpEntry& e, int inplace) {
  if (e.one_buffer) return {true};
  if (!has_in_place(e) || inplace == 0) return {false};
  if (inplace == 1) return {true};
  return {false, true};
}

const CollOpEntry& coll_op_entry(CollOp op) {
  for (const auto& e : kTable)
    if (e.op == op) return e;
  // send and recv are send_recv's halves in bench coll, never a row of their own.
  throw std::logic_error(std::string("bench coll has no row for ") + to_string(op) +
                         " (a defect: the caller mapped it)");
}

}  // namespace sax::harness
