//! What a broken or hostile tool or MCP server sends (issue 49): each case
//! checked against its bound, with the well-behaved tools still served.

mod answers;
mod flood;
mod images;
mod listings;
